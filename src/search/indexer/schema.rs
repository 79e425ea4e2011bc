//! The vector table and each model's HNSW index, made sure of at start.

use crate::db::{Db, Job};

use super::*;
use crate::embed::Embedder;

/// Makes sure the vector table exists (creating pgvector when allowed) and this model has its
/// HNSW index. Errors name what is missing.
pub async fn prepare_schema(db: &Db, embedder: &Embedder) -> Result<(), String> {
    let mut tx = begin(db, Job::Schema)
        .await
        .map_err(|e| format!("checking for pgvector failed: {e}"))?;
    let ready = sqlx::query_scalar!(r#"SELECT mnemo_create_vector_tables() AS "ready!""#)
        .fetch_one(&mut tx)
        .await
        .map_err(|e| format!("checking for pgvector failed: {e}"))?;
    if !ready {
        return Err(
            "MNEMO_EMBEDDER needs the PostgreSQL extension pgvector: install it, or have \
                    a superuser run `CREATE EXTENSION vector` in this database"
                .into(),
        );
    }
    // One partial index per table and model: the column has no fixed dimension, the cast gives
    // it one.
    for table in ["memory_vectors", "message_vectors", "task_vectors"] {
        let name = format!("{table}_hnsw_{}", short_hash(embedder.model_id()));
        let statement = sqlx::query_scalar!(
            "SELECT format('CREATE INDEX IF NOT EXISTS %I ON %I USING hnsw \
                            ((embedding::vector(%s)) vector_cosine_ops) WHERE model = %L',
                           $1::text, $2::text, $3::text, $4::text) AS \"statement!\"",
            name,
            table,
            embedder.dimensions().to_string(),
            embedder.model_id()
        )
        .fetch_one(&mut tx)
        .await
        .map_err(|e| format!("preparing the vector index failed: {e}"))?;
        sqlx::raw_sql(&statement)
            .execute(&mut tx)
            .await
            .map_err(|e| format!("creating the vector index on {table} failed: {e}"))?;
    }
    tx.commit()
        .await
        .map_err(|e| format!("creating the vector indexes failed: {e}"))
}

/// Eight hex digits naming a model in an index name.
fn short_hash(model_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(model_id.as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}
