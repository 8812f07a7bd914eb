//! An account's declaration as a document: the `[[accounts]]` entries of
//! `allot accounts export` / `import`, the body of `POST /v1/accounts`, the
//! store's rows of the live tree and the `create` / `replace` values of an
//! account change file — one shape, pools by name.

use std::collections::BTreeMap;

use allot_core::{AccountSpec, Cluster, PoolId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An account's declaration: `[[accounts]]` of the config, `POST
/// /v1/accounts`, `allot accounts export` / `import`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccountDecl {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_gpu_hours: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impact: Option<f64>,
    /// Pool names (PRIO-2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy_pools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_service_gpus: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, f64>,
    /// Researchers' budgets within the account, NGH per period (BUD-6).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_budgets: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
}

/// The declaration of `s` as the API and the store write it (pools by name).
pub fn decl_of(s: &AccountSpec, cluster: &Cluster) -> AccountDecl {
    AccountDecl {
        path: s.path.clone(),
        share: s.share,
        budget_gpu_hours: s.budget_gpu_hours,
        impact: s.impact,
        legacy_pools: s.legacy_pools.as_ref().map(|ps| ps.iter().map(|p| cluster.pool(*p).name.clone()).collect()),
        max_service_gpus: s.max_service_gpus,
        users: s.users.clone(),
        user_budgets: s.user_budgets.clone(),
        closed: s.closed,
    }
}

/// The spec of a declaration; an unknown pool is an error naming it.
pub fn spec_of(d: &AccountDecl, cluster: &Cluster) -> Result<AccountSpec, String> {
    let legacy_pools = match &d.legacy_pools {
        None => None,
        Some(names) => Some(
            names
                .iter()
                .map(|n| {
                    cluster.pool_by_name(n).ok_or_else(|| {
                        let known: Vec<&str> = cluster.pools.iter().map(|p| p.name.as_str()).collect();
                        format!(
                            "account {:?}: unknown pool {n:?} in legacy_pools (pools: {})",
                            d.path,
                            known.join(", ")
                        )
                    })
                })
                .collect::<Result<Vec<PoolId>, String>>()?,
        ),
    };
    Ok(AccountSpec {
        path: d.path.clone(),
        share: d.share,
        budget_gpu_hours: d.budget_gpu_hours,
        impact: d.impact,
        legacy_pools,
        max_service_gpus: d.max_service_gpus,
        users: d.users.clone(),
        user_budgets: d.user_budgets.clone(),
        closed: d.closed,
    })
}
