//! Random secrets and their hashes: API tokens, token ids, store
//! identities, request fingerprints. A leaf below both the store and
//! [`crate::auth`].

use rand::RngCore;
use sha2::{Digest, Sha256};

/// A fresh random token.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("allot_{}", hex(&bytes))
}

/// A person's session token (`allot login`): `allot_s_` + 64 hex digits.
pub fn new_session_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("allot_s_{}", hex(&bytes))
}

/// A fresh random token id (32 hex digits), unrelated to the token's text.
pub fn new_token_id() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    hex(&bytes)
}

/// SHA-256 of a token (or any text), hex.
pub fn hash_token(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `a` and `b` are equal, in time that depends on their lengths
/// only (for secrets compared with what a client sent).
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
