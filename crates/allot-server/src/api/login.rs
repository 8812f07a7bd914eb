//! People sign in as themselves (docs/security.md): `allot login` proves
//! its caller's Unix identity with a munge credential and gets a session
//! token that lasts `[identity] session_ttl`; what the person may do comes
//! from `[[grants]]` on every request. Every sign-in is audited (who, how,
//! from where, refused or not); people list and end their sessions, admins
//! everyone's.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{ApiError, ApiErrors, App, Auth, Body};
use crate::identity::UnixUser;
use crate::munge::MungeError;
use crate::signin::{self, Attempt, How, Source};
use crate::store::LoginRow;
use crate::views::{LoginCreated, LoginInfo, MungeLogin};

/// `GET /v1/login`: how to sign in (no token needed).
#[utoipa::path(get, path = "/v1/login", summary = "how people sign in", description = "No token needed.", responses((status = 200, description = "success", body = LoginInfo), ApiErrors))]
pub async fn info(State(app): State<App>) -> Json<LoginInfo> {
    let mut methods = Vec::new();
    if app.auth.identity().munge {
        methods.push("munge".to_string());
    }
    if app.login_socket.is_some() {
        methods.push("peercred".to_string());
    }
    let socket = app.login_socket.as_ref().map(|p| p.display().to_string());
    Json(LoginInfo { methods, munge_payload: crate::munge::payload_for(&app.instance), socket })
}

/// `POST /v1/login/munge`: a person's munge credential for a session.
#[utoipa::path(post, path = "/v1/login/munge", summary = "sign in with a munge credential", description = "No token needed: the credential proves the caller's Unix user; [[grants]] decide what they may do.", request_body = MungeLogin, responses((status = 201, description = "signed in", body = LoginCreated), ApiErrors))]
pub async fn munge(State(app): State<App>, source: Source, Body(req): Body<MungeLogin>) -> Response {
    let now = crate::clock::now() as i64;
    let attempt = Attempt { who: None, how: How::Munge, source, refused: None };
    match app.limits.signin.admit(source) {
        Ok(admitted) => match munge_admitted(&app, attempt, admitted, req, now).await {
            Ok(created) => (StatusCode::CREATED, Json(created)).into_response(),
            Err(e) => e.into_response(),
        },
        Err(limited) => {
            if limited.first {
                signin::audit(&app.store, now, &Attempt { refused: Some(signin::TOO_MANY), ..attempt }).await;
            }
            let wait = limited.retry_after_s;
            let why = format!("too many sign-in attempts from this address: try again in {wait} s");
            let mut r = ApiError::new(super::ErrorKind::TooManyRequests, why).into_response();
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, HeaderValue::from(wait));
            r
        }
    }
}

/// A munge sign-in the limit let through.
async fn munge_admitted(
    app: &App,
    attempt: Attempt<'_>,
    admitted: signin::Admitted,
    req: MungeLogin,
    now: i64,
) -> Result<LoginCreated, ApiError> {
    let refuse = |who: Option<String>, why: String| async move {
        signin::audit(&app.store, now, &Attempt { who: who.as_deref(), refused: Some(&why), ..attempt }).await;
        why
    };
    if !app.auth.identity().munge {
        let why = refuse(None, "munge sign-in is off on this server ([identity] munge = false)".into()).await;
        return Err(ApiError::forbidden(why));
    }
    let cred = match crate::munge::decode(&req.credential, app.auth.identity().munge_socket.as_deref()).await {
        Ok(c) => c,
        Err(MungeError::Unavailable(m)) => {
            tracing::error!(error = %m, "munge sign-in failed");
            app.limits.signin.signed_in(admitted);
            return Err(ApiError::new(super::ErrorKind::Unavailable, format!("munge sign-in is unavailable: {m}")));
        }
        Err(e) => return Err(ApiError::unauthorized(refuse(None, e.to_string()).await)),
    };
    let uid = Some(format!("uid {}", cred.uid));
    let expected = crate::munge::payload_for(&app.instance);
    if cred.payload.trim_end() != expected {
        let why = MungeError::Audience(cred.payload.chars().take(80).collect()).to_string();
        return Err(ApiError::unauthorized(refuse(uid, why).await));
    }
    if let Err(e) = app.seen.take(&req.credential, cred.encode_t + cred.ttl_s, now) {
        return Err(ApiError::unauthorized(refuse(uid, e.to_string()).await));
    }
    let user = match UnixUser::by_uid(cred.uid) {
        Ok(u) => u,
        Err(e) => return Err(ApiError::unauthorized(refuse(uid, e.to_string()).await)),
    };
    let Some(who) = crate::auth::principal_of(&user.name, &user.group_names, &app.auth.identity()) else {
        let why = format!(
            "{} (uid {}) is in no Unix user or group this server grants anything ([[grants]]): ask an admin",
            user.name, user.uid
        );
        return Err(ApiError::forbidden(refuse(Some(user.name.clone()), why).await));
    };
    let (id, token, expires_t) = app.auth.open_session(&user.name, None, "munge", &attempt.source.to_string()).await?;
    app.limits.signin.signed_in(admitted);
    signin::audit(&app.store, now, &Attempt { who: Some(&user.name), ..attempt }).await;
    tracing::info!(user = %user.name, uid = user.uid, role = who.role.as_str(), "signed in with munge");
    Ok(LoginCreated { id, token, user: user.name, role: who.role.as_str().into(), expires_t })
}

/// `GET /v1/sessions`: the caller's own sessions (admins: everyone's).
#[utoipa::path(get, path = "/v1/sessions", summary = "people's sessions", description = "Roles: any (a person sees their own; admins every one).", security(("bearer" = [])), responses((status = 200, description = "success", body = Vec<LoginRow>), ApiErrors))]
pub async fn sessions(State(app): State<App>, Auth(who): Auth) -> Result<Json<Vec<LoginRow>>, ApiError> {
    let now = crate::clock::now() as i64;
    let mine = if who.is_admin() { None } else { Some(who.unix_user.as_deref().unwrap_or("\u{0}")) };
    Ok(Json(app.store.logins(mine, now).await?))
}

/// `DELETE /v1/sessions/{id}`: ends a session (one's own; admins any).
#[utoipa::path(delete, path = "/v1/sessions/{id}", summary = "end a session", description = "Roles: any (one's own sessions; admins every one).", security(("bearer" = [])), params(("id" = String, Path, description = "the session's id")), responses((status = 204, description = "ended"), ApiErrors))]
pub async fn end_session(
    State(app): State<App>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let now = crate::clock::now() as i64;
    let mine = if who.is_admin() { None } else { Some(who.unix_user.as_deref().unwrap_or("\u{0}")) };
    if !app.store.delete_login(&id, mine, &who.name, now).await? {
        return Err(ApiError::not_found(format!("no session {id:?} of yours")));
    }
    app.auth.forget_all();
    Ok(StatusCode::NO_CONTENT)
}
