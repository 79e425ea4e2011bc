//! The vector side shared by every search: a text has two vectors (alone, and after what precedes
//! it in its stream), and its similarity is the mean of the two (see [`crate::search::fusion`]);
//! a candidate close to the other candidates is discounted by its [`crowding`].

/// The CTE `name` grouping a CTE `near` (the nearest vectors: `keys`, `with_context`,
/// `embedding`, `score`) by text: how many of its vectors are among the nearest (`n`), their
/// summed similarity (`total`), whether the one with context is (`has_context`) and the vector
/// alone when it is (`alone`). `tail` follows the grouping (an `ORDER BY` and `LIMIT`, or
/// nothing).
pub fn grouped_cte(name: &str, keys: &str, tail: &str) -> String {
    format!(
        "{name} AS (
             SELECT {keys}, count(*) AS n, sum(score) AS total,
                    bool_or(with_context) AS has_context,
                    (array_agg(embedding) FILTER (WHERE NOT with_context))[1] AS alone
             FROM near GROUP BY {keys} {tail}
         )"
    )
}

/// The similarity (`real`) of a text of a [`grouped_cte`] aliased `alias`: the mean of its two
/// vectors' when both are among the nearest; else the one that is not is looked up in `table` by
/// `lookup` (columns naming the text in both) and the model `$2`, and a text with one vector has
/// that one's. `distance` is the cosine distance of `v.embedding` to the query.
pub fn mean_similarity(table: &str, alias: &str, lookup: &[&str], distance: &str) -> String {
    let by_key = by_key(alias, lookup);
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

/// The vector (of the text alone) of a text aliased `alias`: its `alone` when the nearest held
/// it, else looked up in `table` by `lookup` (columns naming the text in both) and the model
/// `$2`; for [`crowding`].
pub fn alone_vector(table: &str, alias: &str, lookup: &[&str]) -> String {
    let by_key = by_key(alias, lookup);
    format!(
        "coalesce({alias}.alone, (
             SELECT v.embedding FROM {table} v
             WHERE v.tenant_id = current_setting('mnemo.tenant')
               AND v.user_id = current_setting('mnemo.user'){by_key}
               AND v.model = $2 AND NOT v.with_context))"
    )
}

/// ` AND v.<column> = <alias>.<column>` for each column of `lookup`.
fn by_key(alias: &str, lookup: &[&str]) -> String {
    lookup
        .iter()
        .map(|k| format!(" AND v.{k} = {alias}.{k}"))
        .collect()
}

/// How many of its closest fellow candidates set a candidate's crowding (see [`crowding`]).
pub const CROWD_NEIGHBOURS: usize = 10;

/// Share of its crowding that a candidate's closeness to the query loses in the ranking (see
/// [`crowding`]).
pub const CROWD_WEIGHT: f32 = 0.3;

/// How crowded each candidate of a search is: the mean cosine similarity of its vector to its
/// [`CROWD_NEIGHBOURS`] closest fellow candidates (0 for one without a vector, or alone).
///
/// Some texts are near every query: short, generic ones ("I'm always sitting down, dear.",
/// "Haha, of course she did.") sit in the middle of a model's space and come up among the nearest
/// for questions on any subject, ahead of the turn that answers. Such a text is also near most
/// other candidates, where a specific one is near few. So the ranking compares the query's
/// similarity less [`CROWD_WEIGHT`] × this crowding (as cross-domain similarity local scaling
/// does, measured over the search's own candidates instead of the whole corpus, so it costs no
/// write and follows every filter). The reported `similarity` stays the plain cosine.
pub fn crowding(vectors: &[Option<&[f32]>]) -> Vec<f32> {
    // The vectors of one size (the embedder's), normalised, side by side in one buffer; zero
    // vectors and those of another size are left out.
    let dims = vectors
        .iter()
        .flatten()
        .map(|v| v.len())
        .next()
        .unwrap_or(0);
    let mut rows: Vec<usize> = Vec::with_capacity(vectors.len());
    let mut flat: Vec<f32> = Vec::with_capacity(vectors.len() * dims);
    for (i, v) in vectors.iter().enumerate() {
        let Some(v) = v.filter(|v| v.len() == dims) else {
            continue;
        };
        let norm = dot(v, v).sqrt();
        if norm > 0.0 {
            rows.push(i);
            flat.extend(v.iter().map(|x| x / norm));
        }
    }
    let n = rows.len();
    let row = |i: usize| &flat[i * dims..(i + 1) * dims];
    let mut similar: Vec<Vec<f32>> = vec![Vec::with_capacity(n.saturating_sub(1)); n];
    for i in 0..n {
        for j in i + 1..n {
            let s = dot(row(i), row(j));
            similar[i].push(s);
            similar[j].push(s);
        }
    }
    let mut out = vec![0.0; vectors.len()];
    for (i, mut s) in rows.into_iter().zip(similar) {
        if s.is_empty() {
            continue;
        }
        let k = s.len().min(CROWD_NEIGHBOURS);
        // The k largest, in any order.
        s.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        out[i] = s[..k].iter().sum::<f32>() / k as f32;
    }
    out
}

/// The dot product, in eight independent sums so that it vectorises.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for ((lane, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_near_every_other_is_crowded_and_a_specific_one_is_not() {
        // Three texts on one subject each, and a generic one halfway to all of them.
        let a = [1.0, 0.0, 0.0, 0.0];
        let b = [0.0, 1.0, 0.0, 0.0];
        let c = [0.0, 0.0, 2.0, 0.0]; // not normalised: scaled the same
        let hub = [1.0, 1.0, 1.0, 0.0];
        let vectors = [
            Some(&a[..]),
            Some(&b[..]),
            Some(&c[..]),
            Some(&hub[..]),
            None,
        ];
        let crowding = crowding(&vectors);
        let third = 1.0 / 3.0f32.sqrt();
        // Each specific text: 0, 0 and `third` with the hub, of which the mean.
        for s in &crowding[..3] {
            assert!((s - third / 3.0).abs() < 1e-6, "{crowding:?}");
        }
        assert!((crowding[3] - third).abs() < 1e-6, "{crowding:?}");
        assert_eq!(crowding[4], 0.0);
        assert_eq!(super::crowding(&[Some(&a[..])]), [0.0]);
        assert!(super::crowding(&[]).is_empty());
    }

    #[test]
    fn crowding_counts_only_the_closest_neighbours() {
        let near = [1.0f32, 0.0];
        let mut vectors: Vec<Vec<f32>> = vec![near.to_vec(); CROWD_NEIGHBOURS + 1];
        // Far from the first, and more of them than the neighbours counted.
        vectors.extend(std::iter::repeat_n(vec![-1.0, 0.0], 3 * CROWD_NEIGHBOURS));
        let slices: Vec<Option<&[f32]>> = vectors.iter().map(|v| Some(&v[..])).collect();
        let crowding = crowding(&slices);
        assert!((crowding[0] - 1.0).abs() < 1e-6, "{crowding:?}");
        let dots: Vec<f32> = (0..19).map(|i| i as f32).collect();
        assert_eq!(
            dot(&dots, &dots),
            (0..19).map(|i| (i * i) as f32).sum::<f32>()
        );
    }
}
