//! Erasure: every row of a user, or of a whole tenant, in every table.
//!
//! The tables are not listed here: they are read from the catalogue (every table of the public
//! schema with a `tenant_id` column, and for a user also a `user_id` column), so a table a later
//! migration adds is erased too. Rows are deleted children first (following the foreign keys),
//! so each table's count is its own rows and no cascade hides any. Every statement also names
//! the scope in its `WHERE`, on top of the row-level-security policy of the role it runs as.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use sqlx::{Postgres, QueryBuilder};
use utoipa::ToSchema;

use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// What an erasure deleted.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Erased {
    pub tenant_id: String,
    /// The user whose data was erased; absent when a whole tenant was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Rows deleted per table (every table that holds such rows is listed, zeros included).
    pub deleted: BTreeMap<String, u64>,
    /// All rows deleted.
    pub total: u64,
}

/// Whose rows to delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The transaction's tenant and user (`mnemo.tenant`, `mnemo.user`).
    User,
    /// Every user of the transaction's tenant.
    Tenant,
}

struct Table {
    name: String,
    sql_name: String,
    deletable: bool,
}

/// A foreign key: the referencing table and the referenced one.
struct Edge {
    child: String,
    parent: String,
}

/// Deletes the rows `reach` names from every scoped table, in the transaction `conn` (already
/// switched to the role and settings of that reach).
pub async fn erase(conn: &mut Scoped, reach: Reach) -> ApiResult<BTreeMap<String, u64>> {
    let tables = sqlx::query_as!(
        Table,
        r#"SELECT c.relname::text AS "name!", c.oid::regclass::text AS "sql_name!",
                has_table_privilege(c.oid, 'DELETE') AS "deletable!"
         FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
           AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
                       AND a.attname = 'tenant_id' AND NOT a.attisdropped)
           AND ($1 OR EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
                              AND a.attname = 'user_id' AND NOT a.attisdropped))
         ORDER BY c.relname"#,
        reach == Reach::Tenant
    )
    .fetch_all(&mut *conn)
    .await?;
    if let Some(t) = tables.iter().find(|t| !t.deletable) {
        // A table whose migration did not give the erasing role its rights: refuse to claim an
        // erasure that would leave rows behind.
        return Err(ApiError::Internal(anyhow::anyhow!(
            "the erasing role may not delete from table {}; its migration must call mnemo_scope_table",
            t.sql_name
        )));
    }
    let edges: Vec<(String, String)> = sqlx::query_as!(
        Edge,
        r#"SELECT conrelid::regclass::text AS "child!", confrelid::regclass::text AS "parent!"
         FROM pg_constraint WHERE contype = 'f'"#
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|e| (e.child, e.parent))
    .collect();
    let filter = match reach {
        Reach::User => {
            "tenant_id = current_setting('mnemo.tenant') AND user_id = current_setting('mnemo.user')"
        }
        Reach::Tenant => "tenant_id = current_setting('mnemo.tenant')",
    };
    let names: BTreeMap<&str, &str> = tables
        .iter()
        .map(|t| (t.sql_name.as_str(), t.name.as_str()))
        .collect();
    let mut deleted = BTreeMap::new();
    for sql_name in children_first(names.keys().copied().collect(), &edges) {
        // The table is an identifier read from the catalogue (quoted by `regclass`), so each
        // statement is built for its table.
        let mut delete = QueryBuilder::<Postgres>::new("WITH d AS (DELETE FROM ");
        delete
            .push(sql_name)
            .push(" WHERE ")
            .push(filter)
            .push(" RETURNING 1) SELECT count(*) FROM d");
        let n: i64 = delete.build_query_scalar().fetch_one(&mut *conn).await?;
        let name = names.get(sql_name).copied().unwrap_or(sql_name);
        deleted.insert(name.to_string(), u64::try_from(n).unwrap_or(0));
    }
    Ok(deleted)
}

/// `tables` ordered so that every table comes before the tables its foreign keys reference
/// (`edges` are (referencing, referenced)); a cycle, which the schema does not have, ends in name
/// order.
fn children_first<'a>(tables: BTreeSet<&'a str>, edges: &[(String, String)]) -> Vec<&'a str> {
    let mut left = tables;
    let mut out = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let ready: Vec<&str> = left
            .iter()
            .copied()
            .filter(|t| {
                !edges.iter().any(|(child, parent)| {
                    parent == t && child != t && left.contains(child.as_str())
                })
            })
            .collect();
        let take = if ready.is_empty() {
            left.iter().copied().take(1).collect()
        } else {
            ready
        };
        for t in take {
            left.remove(t);
            out.push(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_come_before_their_parents() {
        let edges = vec![
            ("chunks".to_string(), "memories".to_string()),
            ("vectors".to_string(), "chunks".to_string()),
            ("items".to_string(), "plans".to_string()),
            ("plans".to_string(), "tasks".to_string()),
            ("tasks".to_string(), "tasks".to_string()),
            ("elsewhere".to_string(), "tasks".to_string()),
        ];
        let tables: BTreeSet<&str> = ["memories", "chunks", "vectors", "tasks", "plans", "items"]
            .into_iter()
            .collect();
        let order = children_first(tables, &edges);
        let pos = |t: &str| order.iter().position(|x| *x == t).unwrap();
        assert_eq!(order.len(), 6);
        assert!(pos("vectors") < pos("chunks") && pos("chunks") < pos("memories"));
        assert!(pos("items") < pos("plans") && pos("plans") < pos("tasks"));
    }
}
