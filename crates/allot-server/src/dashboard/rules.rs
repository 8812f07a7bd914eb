//! The rule documentation the reasons link to: `/rules` is `docs/rules.md`
//! (every rule id an anchor, `/rules#FS-1`), and `/docs/<file>.md` every
//! other page of `docs/`, all embedded in the binary and rendered from
//! Markdown, with links between them kept inside the dashboard.

use std::collections::HashSet;

use axum::Router;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use maud::{PreEscaped, html};
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd};

use allot_core::rule::Rule;

use crate::api::App;
use crate::api::extract::Path;

use super::layout::{self, Nav, Page};
use super::session::Viewer;

macro_rules! docs {
    ($($name:literal),* $(,)?) => {
        /// Every page of `docs/`, by file name.
        pub const DOCS: &[(&str, &str)] = &[$(($name, include_str!(concat!("../../../../docs/", $name)))),*];
    };
}

docs!(
    "accounts.md",
    "architecture.md",
    "baselines.md",
    "benchmarks.md",
    "budgets.md",
    "cli.md",
    "compare.md",
    "conditions.md",
    "config.md",
    "contract.md",
    "dashboard.md",
    "design.md",
    "fairshare.md",
    "generator.md",
    "impact.md",
    "importers.md",
    "kubernetes.md",
    "measures.md",
    "operations.md",
    "placement.md",
    "quickstart.md",
    "reliability.md",
    "results.md",
    "rules.md",
    "security.md",
    "server.md",
    "simulator.md",
    "style.md",
    "traces.md",
);

pub fn routes() -> Router<App> {
    Router::new().route("/rules", get(rules)).route("/docs/{name}", get(doc))
}

/// `/rules`: first what each rule means for a person's work, in plain
/// words (each row the anchor a reason's rule id links to), then the
/// rules in full with their references for contributors (issue 30,
/// point 8).
async fn rules(v: Viewer) -> Response {
    let text = DOCS.iter().find(|(n, _)| *n == "rules.md").map_or("", |(_, t)| t);
    let body = html! {
        article.doc {
            h1 { "What the rules mean for your work" }
            p { "A reason on the dashboard or in " code { "allot show" } " starts with the sentence below, then names \
                 the rule and its numbers." }
            table.rules {
                thead { tr { th { "Rule" } th { "What it means for you" } th { "The rule" } } }
                tbody {
                    @for r in Rule::ALL {
                        tr id=(r.id()) { td { code { (r.id()) } } td { (r.plain()) } td { (r.title()) } }
                    }
                }
            }
            h2 { "The rules in full, for contributors" }
            (PreEscaped(render_without_anchors(text)))
        }
    };
    layout::page(&v, Page { title: "Policy rules".into(), nav: Nav::Rules, body, refresh: None })
}

async fn doc(v: Viewer, Path(name): Path<String>) -> Response {
    let Some((_, text)) = DOCS.iter().find(|(n, _)| *n == name) else {
        return layout::error_page(
            Some(&v),
            StatusCode::NOT_FOUND,
            "No such page",
            &format!("There is no document {name:?}."),
        );
    };
    let body = html! { article.doc { (PreEscaped(render(text))) } };
    layout::page(&v, Page { title: name.trim_end_matches(".md").to_string(), nav: Nav::Rules, body, refresh: None })
}

/// Markdown to HTML: headings get GitHub-style ids, a rule id in a table
/// cell becomes its anchor (`#FS-1`), links to other documents stay in the
/// dashboard (`/docs/…`, `/rules`), raw HTML in the text is escaped.
pub fn render(md: &str) -> String {
    render_anchored(md, HashSet::new())
}

/// [`render`] with no rule anchors (the page has its own).
fn render_without_anchors(md: &str) -> String {
    render_anchored(md, Rule::ALL.iter().map(|r| r.id().to_string()).collect())
}

/// [`render`], anchoring the rule ids not in `anchored`.
fn render_anchored(md: &str, mut anchored: HashSet<String>) -> String {
    let ids: HashSet<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
    let mut out: Vec<Event> = Vec::new();
    let mut in_cell = false;
    let mut heading: Option<(pulldown_cmark::HeadingLevel, Vec<Event>)> = None;
    for ev in Parser::new_ext(md, Options::ENABLE_TABLES) {
        let ev = match ev {
            Event::Html(h) | Event::InlineHtml(h) => Event::Text(h),
            Event::Start(Tag::Link { link_type, dest_url, title, id }) => {
                Event::Start(Tag::Link { link_type, dest_url: local_link(dest_url), title, id })
            }
            Event::Start(Tag::Image { .. }) | Event::End(TagEnd::Image) => continue,
            other => other,
        };
        match &ev {
            Event::Start(Tag::Heading { level, .. }) => {
                heading = Some((*level, Vec::new()));
                continue;
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((level, inner)) = heading.take() {
                    let text: String = inner
                        .iter()
                        .filter_map(|e| match e {
                            Event::Text(t) | Event::Code(t) => Some(t.as_ref()),
                            _ => None,
                        })
                        .collect();
                    out.push(Event::Start(Tag::Heading {
                        level,
                        id: Some(slug(&text).into()),
                        classes: Vec::new(),
                        attrs: Vec::new(),
                    }));
                    out.extend(inner);
                    out.push(Event::End(TagEnd::Heading(level)));
                }
                continue;
            }
            Event::Start(Tag::TableCell) => in_cell = true,
            Event::End(TagEnd::TableCell) => in_cell = false,
            Event::Code(c) if in_cell && ids.contains(c.as_ref()) && anchored.insert(c.to_string()) => {
                out.push(Event::InlineHtml(format!(r#"<span class="anchor" id="{c}"></span>"#).into()));
            }
            _ => {}
        }
        match &mut heading {
            Some((_, inner)) => inner.push(ev),
            None => out.push(ev),
        }
    }
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, out.into_iter());
    html
}

/// A link to another document of `docs/` kept inside the dashboard.
fn local_link(url: CowStr<'_>) -> CowStr<'_> {
    if url.contains("://") || url.starts_with('#') || url.starts_with('/') {
        return url;
    }
    let (file, frag) = url.split_once('#').map_or((url.as_ref(), None), |(f, h)| (f, Some(h)));
    let file = file.trim_start_matches("./").trim_start_matches("docs/");
    if !DOCS.iter().any(|(n, _)| *n == file) {
        return url;
    }
    let base = if file == "rules.md" { "/rules".to_string() } else { format!("/docs/{file}") };
    match frag {
        Some(h) => format!("{base}#{h}").into(),
        None => base.into(),
    }
}

/// GitHub's heading anchor: lower case, spaces to `-`, punctuation dropped.
fn slug(text: &str) -> String {
    text.trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("docs/")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".md"))
            .collect();
        on_disk.sort();
        let embedded: Vec<String> = DOCS.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(embedded, on_disk, "docs! in dashboard/rules.rs lists every page of docs/");
    }

    #[test]
    fn every_rule_has_its_anchor_on_the_rules_page() {
        let html = render(DOCS.iter().find(|(n, _)| *n == "rules.md").expect("rules.md").1);
        for r in Rule::ALL {
            assert!(html.contains(&format!(r#"id="{}""#, r.id())), "no anchor for {}", r.id());
        }
    }

    #[test]
    fn links_stay_inside_and_html_is_escaped() {
        let html = render(
            "# Where it runs\n\nSee [c](contract.md#con-5), [r](rules.md), [x](https://e.org).\n\n<script>x</script>\n",
        );
        assert!(html.contains(r#"<h1 id="where-it-runs">"#), "{html}");
        assert!(html.contains(r#"href="/docs/contract.md#con-5""#), "{html}");
        assert!(html.contains(r#"href="/rules""#), "{html}");
        assert!(html.contains(r#"href="https://e.org""#), "{html}");
        assert!(!html.contains("<script>"), "{html}");
    }
}
