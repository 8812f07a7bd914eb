//! People sign in as themselves (docs/security.md): `allot login` proves
//! its caller's Unix identity with a munge credential and gets a session
//! token that lasts `[identity] session_ttl`; what the person may do comes
//! from `[[grants]]` on every request. Every sign-in is audited (who, how,
//! from where, refused or not); people list and end their sessions, admins
//! everyone's.

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiError, ApiErrors, App, Auth, Body};
use crate::identity::UnixUser;
use crate::munge::MungeError;
use crate::store::LoginRow;

/// How people sign in to this server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoginInfo {
    /// `munge` when people may sign in with a munge credential.
    pub methods: Vec<String>,
    /// The payload a munge credential for this server carries.
    pub munge_payload: String,
}

/// A munge credential (`munge -s PAYLOAD`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MungeLogin {
    pub credential: String,
}

/// A session opened: its token is shown this once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoginCreated {
    pub token: String,
    pub user: String,
    pub role: String,
    pub expires_t: i64,
}

/// `GET /v1/login`: how to sign in (no token needed).
#[utoipa::path(get, path = "/v1/login", summary = "how people sign in", description = "No token needed.", responses((status = 200, description = "success", body = LoginInfo)))]
pub async fn info(State(app): State<App>) -> Json<LoginInfo> {
    let methods = if app.auth.identity().munge { vec!["munge".to_string()] } else { Vec::new() };
    Json(LoginInfo { methods, munge_payload: crate::munge::payload_for(&app.instance) })
}

/// `POST /v1/login/munge`: a person's munge credential for a session.
#[utoipa::path(post, path = "/v1/login/munge", summary = "sign in with a munge credential", description = "No token needed: the credential proves the caller's Unix user; [[grants]] decide what they may do.", request_body = MungeLogin, responses((status = 201, description = "signed in", body = LoginCreated), ApiErrors))]
pub async fn munge(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Body(req): Body<MungeLogin>,
) -> Result<(StatusCode, Json<LoginCreated>), ApiError> {
    let source = peer.ip().to_string();
    let now = crate::clock::now() as i64;
    let refuse = |who: &str, why: String| {
        let (app, who, source) = (app.clone(), who.to_string(), source.clone());
        let why2 = why.clone();
        async move {
            if let Err(e) = app.store.audit_sign_in(now, &who, "munge", &source, Some(&why2)).await {
                tracing::warn!(error = %e, "could not audit a refused sign-in");
            }
            tracing::info!(who = %who, source = %source, why = %why2, "sign-in refused");
            why
        }
    };
    if !app.auth.identity().munge {
        let why = refuse("unknown", "munge sign-in is off on this server ([identity] munge = false)".into()).await;
        return Err(ApiError::forbidden(why));
    }
    let cred = match crate::munge::decode(&req.credential, app.auth.identity().munge_socket.as_deref()).await {
        Ok(c) => c,
        Err(MungeError::Unavailable(m)) => {
            tracing::error!(error = %m, "munge sign-in failed");
            return Err(ApiError::new(super::ErrorKind::Unavailable, format!("munge sign-in is unavailable: {m}")));
        }
        Err(e) => return Err(ApiError::unauthorized(refuse("unknown", e.to_string()).await)),
    };
    let expected = crate::munge::payload_for(&app.instance);
    if cred.payload.trim_end() != expected {
        let why = MungeError::Audience(cred.payload.chars().take(80).collect()).to_string();
        return Err(ApiError::unauthorized(refuse(&format!("uid {}", cred.uid), why).await));
    }
    if let Err(e) = app.seen.take(&req.credential, cred.encode_t + cred.ttl_s, now) {
        return Err(ApiError::unauthorized(refuse(&format!("uid {}", cred.uid), e.to_string()).await));
    }
    let user = match UnixUser::by_uid(cred.uid) {
        Ok(u) => u,
        Err(e) => return Err(ApiError::unauthorized(refuse(&format!("uid {}", cred.uid), e.to_string()).await)),
    };
    let Some(who) = crate::identity::principal_of(&user, app.auth.identity()) else {
        let why = format!(
            "{} (uid {}) is in no Unix user or group this server grants anything ([[grants]]): ask an admin",
            user.name, user.uid
        );
        return Err(ApiError::forbidden(refuse(&user.name, why).await));
    };
    let (token, expires_t) = app.auth.open_session(&user, "munge", &source).await?;
    app.store.audit_sign_in(now, &user.name, "munge", &source, None).await?;
    tracing::info!(user = %user.name, uid = user.uid, role = who.role.as_str(), source = %source, "signed in with munge");
    Ok((StatusCode::CREATED, Json(LoginCreated { token, user: user.name, role: who.role.as_str().into(), expires_t })))
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
