//! The journal's entries are JSON: every number in them, floats included
//! (a GPU utilisation sample, a GPU type's weight in the ledger's usage),
//! comes back from the store bit for bit, or a replay would not make the
//! live run's decisions exactly.

use allot_core::WorkloadId;
use allot_core::engine::{Close, Entry, Input, UsageSpan};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn floats_come_back_from_the_journal_bit_for_bit(util in 0.0f64..=1.0, weight in 0.0f64..1e6, bits in any::<u64>()) {
        let any = f64::from_bits(bits);
        let any = if any.is_finite() { any } else { 0.5 };
        let entry = Entry::Step {
            t: 7,
            close: Close::Open,
            inputs: vec![
                Input::GpuUtil { workload: WorkloadId(3), attempt: 1, util },
                Input::GpuUtil { workload: WorkloadId(4), attempt: 2, util: any },
                Input::Usage(vec![UsageSpan {
                    account: "org/a".into(),
                    user: "ann".into(),
                    start: 0,
                    end: Some(60),
                    gpus: 8,
                    weight,
                }]),
            ],
        };
        let json = serde_json::to_string(&entry).unwrap();
        let back: Entry = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back, entry, "{}", json);
    }
}
