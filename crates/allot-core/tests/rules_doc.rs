//! Every rule the code can cite is documented in docs/rules.md, with the
//! same id and statement, so a decision's reason is one hop from its rule.

use allot_core::Rule;

#[test]
fn every_rule_is_documented() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/rules.md");
    let doc = std::fs::read_to_string(path).expect("docs/rules.md exists");
    for r in Rule::ALL {
        let row = format!("| `{}` | {} |", r.id(), r.title());
        assert!(doc.contains(&row), "docs/rules.md lacks the row {row}");
    }
}
