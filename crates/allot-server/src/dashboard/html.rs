//! The document itself, without the navigation: the `<head>`, a bare page
//! (sign-in, refusals before anyone is known), and the headers of every
//! dashboard answer. Below both the page shell ([`super::layout`]) and the
//! session ([`super::session`]).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

/// The `<head>` of every page: its title, the stylesheet and the script.
pub(super) fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · Allot" }
            link rel="stylesheet" href=(super::assets::CSS_URL);
            script src=(super::assets::JS_URL) defer {}
        }
    }
}

/// A page without the navigation (sign-in).
pub fn bare(title: &str, body: Markup) -> Response {
    html_response(html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body.bare { main #main { (body) } }
        }
    })
}

/// An HTML answer with the dashboard's security headers.
pub fn html_response(m: Markup) -> Response {
    let mut r = ([(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"))], m.into_string())
        .into_response();
    security_headers(r.headers_mut());
    r
}

/// Headers of every dashboard answer (shared with the API's raw log).
pub use crate::headers::security_headers;

/// A refusal as a bare page: its status, title and text.
pub fn refusal(status: StatusCode, title: &str, text: &str) -> Response {
    let body = html! { h1 { (title) } p role="alert" { (text) } p { a href="/" { "Back to the dashboard" } } };
    let mut r = bare(title, body);
    *r.status_mut() = status;
    r
}
