//! The page shell (header, navigation, `<main>`), error pages, and the
//! small pieces every page shares: durations, numbers, states and reasons
//! with their rule linked.

use axum::http::StatusCode;
use axum::response::Response;
use maud::{DOCTYPE, Markup, html};

use allot_core::rule::Rule;

use super::html;
use super::session::{Viewer, clear_flash};
use crate::api::ApiError;
use crate::auth::Role;

/// Which section of the navigation a page belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Nav {
    Work,
    Budgets,
    Queue,
    Fleet,
    History,
    Admin,
    Rules,
}

/// A page: its title, section, body and how often it refreshes itself.
pub struct Page {
    pub title: String,
    pub nav: Nav,
    pub body: Markup,
    /// Seconds between in-place refreshes of `<main>`; `None`: never.
    pub refresh: Option<u32>,
}

/// The sections `who` is shown in the navigation.
fn sections(role: Role) -> Vec<(Nav, &'static str, &'static str)> {
    let mut s = vec![
        (Nav::Work, "/", if role == Role::Researcher { "My work" } else { "Work" }),
        (Nav::Budgets, "/budgets", "Budgets"),
        (Nav::Queue, "/queue", "Queue"),
        (Nav::Fleet, "/fleet", "Fleet"),
        (Nav::History, "/history", "History"),
    ];
    if role == Role::Admin {
        s.push((Nav::Admin, "/admin", "Admin"));
    }
    s.push((Nav::Rules, "/rules", "Rules"));
    s
}

/// Renders `p` for `v`: the whole document, or only `<main>`'s content when
/// the dashboard's script refreshes it in place.
pub fn page(v: &Viewer, p: Page) -> Response {
    let main = html! {
        @if let Some(f) = &v.flash {
            @if !v.partial {
                p class={ "flash " (if f.ok { "ok" } else { "error" }) } role=(if f.ok { "status" } else { "alert" }) {
                    (if f.ok { "Done: " } else { "Not done: " }) (f.text)
                }
            }
        }
        (p.body)
    };
    let mut r = if v.partial {
        html::html_response(main)
    } else {
        let doc = html! {
            (DOCTYPE)
            html lang="en" {
                (html::head(&p.title))
                body {
                    a.skip href="#main" { "Skip to content" }
                    header.top {
                        a.brand href="/" { "Allot" }
                        nav aria-label="Sections" {
                            ul {
                                @for (nav, href, label) in sections(v.who.role) {
                                    li { a href=(href) aria-current=[(nav == p.nav).then_some("page")] { (label) } }
                                }
                            }
                        }
                        div.who {
                            span { (v.who.name) " · " (v.who.role.as_str())
                                @for (i, s) in v.who.scopes.iter().enumerate() { @if i == 0 { " of " } @else { ", " } code { (s) } } }
                            a href="/cli" { "Command line" }
                            form method="post" action="/logout" {
                                (csrf(v))
                                button.link type="submit" { "Sign out" }
                            }
                        }
                    }
                    main #main tabindex="-1" data-refresh=[p.refresh] { (main) }
                    footer { "Allot · times in UTC · " a href="/v1/openapi.json" { "API" } }
                }
            }
        };
        html::html_response(doc)
    };
    clear_flash(v, &mut r);
    r
}

/// An error page (with the navigation when someone is signed in).
pub fn error_page(v: Option<&Viewer>, status: StatusCode, title: &str, text: &str) -> Response {
    let Some(v) = v else { return html::refusal(status, title, text) };
    let body = html! { h1 { (title) } p role="alert" { (text) } p { a href="/" { "Back to the dashboard" } } };
    let mut r = page(v, Page { title: title.to_string(), nav: Nav::Work, body, refresh: None });
    *r.status_mut() = status;
    r
}

/// The page for an error of the API's handlers: its status and text.
pub fn api_error(v: &Viewer, e: ApiError) -> Response {
    let title = match e.status() {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::FORBIDDEN => "Not allowed",
        StatusCode::SERVICE_UNAVAILABLE => "Unavailable",
        s if s.is_client_error() => "Refused",
        _ => "Error",
    };
    let text = match &e.field {
        Some(f) => format!("{} (field {f})", e.error),
        None => e.error.clone(),
    };
    error_page(Some(v), e.status(), title, &text)
}

/// The hidden CSRF field of a form.
pub fn csrf(v: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(v.csrf); }
}

/// A duration, compact (`3h07m`), as the reports write it.
pub fn dur(s: i64) -> String {
    allot_report::svg::fmt_duration(s.max(0) as u64)
}

/// A number as the reports write it (`12,000`, `0.25`).
pub fn num(v: f64) -> String {
    allot_report::svg::fmt_num(v)
}

/// Normalised GPU-hours as the ledger writes them.
pub fn ngh(v: f64) -> String {
    allot_core::ledger::format_ngh(v)
}

/// The unit of a chart's time axis over `span_s` seconds, and its length
/// in seconds: days beyond two days, hours beyond two hours, else minutes.
pub fn time_unit(span_s: f64) -> (&'static str, f64) {
    if span_s > 2.0 * 86_400.0 {
        ("days", 86_400.0)
    } else if span_s > 7200.0 {
        ("hours", 3600.0)
    } else {
        ("minutes", 60.0)
    }
}

/// A fraction as a percentage (`48.9 %`).
pub fn pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

/// An instant: `2026-12-03 14:05` in UTC, with the full time as its title.
pub fn when(t: i64) -> Markup {
    let full = allot_core::calendar::format_instant(t.max(0) as u64);
    let short = full.replacen('T', " ", 1);
    let short = short.get(..16).unwrap_or(&short).to_string();
    html! { time datetime=(full) title=(full) { (short) } }
}

/// A workload or attempt state as text with a marker class (the colour is
/// never the only carrier: the word is always there).
pub fn state(s: &str) -> Markup {
    html! { span class={ "state st-" (s) } { (s) } }
}

/// A reason with every rule id in it linked to the rule's documentation.
pub fn reason(text: &str) -> Markup {
    let mut parts: Vec<(&str, Option<Rule>)> = Vec::new();
    let mut rest = text;
    while let Some((start, id)) = next_rule(rest) {
        let rule = Rule::ALL.iter().copied().find(|r| r.id() == id);
        parts.push((&rest[..start], None));
        parts.push((id, rule));
        rest = &rest[start + id.len()..];
    }
    parts.push((rest, None));
    html! {
        @for (t, rule) in parts {
            @match rule {
                Some(r) => a.rule href={ "/rules#" (r.id()) } title=(r.title()) { (t) },
                None => (t),
            }
        }
    }
}

/// The first rule id in `s` (a known one, at a word boundary): its offset.
fn next_rule(s: &str) -> Option<(usize, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_uppercase() && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
            let mut j = i;
            while j < b.len() && b[j].is_ascii_uppercase() {
                j += 1;
            }
            if j < b.len() && b[j] == b'-' {
                let mut k = j + 1;
                while k < b.len() && b[k].is_ascii_digit() {
                    k += 1;
                }
                let cand = &s[i..k];
                if k > j + 1
                    && (k == b.len() || !b[k].is_ascii_alphanumeric())
                    && Rule::ALL.iter().any(|r| r.id() == cand)
                {
                    return Some((i, cand));
                }
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_link_their_rules_and_escape_the_rest() {
        let r = reason("FS-1: below <fair> share; then CON-9 & PLACE-6, not XFS-1 nor FS-99").into_string();
        assert!(r.starts_with(r#"<a class="rule" href="/rules#FS-1""#), "{r}");
        assert!(r.contains(">FS-1</a>: below"), "{r}");
        assert!(r.contains(r#"href="/rules#CON-9""#), "{r}");
        assert!(r.contains(r#"href="/rules#PLACE-6""#), "{r}");
        assert!(r.contains("&lt;fair&gt;") && r.contains("&amp;"), "{r}");
        assert!(!r.contains("#XFS-1") && !r.contains("#FS-99"), "{r}");
    }
}
