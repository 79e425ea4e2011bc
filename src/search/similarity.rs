//! SQL of the vector side shared by every search: a text has two vectors (alone, and after what
//! precedes it in its stream), and its similarity is the mean of the two (see
//! [`crate::search::fusion`]).

/// The CTE `name` grouping a CTE `near` (the nearest vectors: `keys`, `with_context`, `score`) by
/// text: how many of its vectors are among the nearest (`n`), their summed similarity (`total`)
/// and whether the one with context is (`has_context`). `tail` follows the grouping (an `ORDER
/// BY` and `LIMIT`, or nothing).
pub fn grouped_cte(name: &str, keys: &str, tail: &str) -> String {
    format!(
        "{name} AS (
             SELECT {keys}, count(*) AS n, sum(score) AS total,
                    bool_or(with_context) AS has_context
             FROM near GROUP BY {keys} {tail}
         )"
    )
}

/// The similarity (`real`) of a text of a [`grouped_cte`] aliased `alias`: the mean of its two
/// vectors' when both are among the nearest; else the one that is not is looked up in `table` by
/// `lookup` (columns naming the text in both) and the model `$2`, and a text with one vector has
/// that one's. `distance` is the cosine distance of `v.embedding` to the query.
pub fn mean_similarity(table: &str, alias: &str, lookup: &[&str], distance: &str) -> String {
    let by_key: String = lookup
        .iter()
        .map(|k| format!(" AND v.{k} = {alias}.{k}"))
        .collect();
    format!(
        "(CASE WHEN {alias}.n > 1 THEN {alias}.total / {alias}.n
               ELSE coalesce(({alias}.total + (
                   SELECT 1 - {distance} FROM {table} v
                   WHERE v.tenant_id = current_setting('mnemo.tenant')
                     AND v.user_id = current_setting('mnemo.user'){by_key}
                     AND v.model = $2 AND v.with_context = NOT {alias}.has_context)) / 2,
                   {alias}.total)
          END)::real"
    )
}
