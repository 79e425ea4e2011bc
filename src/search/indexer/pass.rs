//! One pass in one transaction: claim due outbox rows, fetch their texts with context, embed them,
//! replace their vectors and delete the rows, or record the failure with its backoff.

use crate::db::{Db, Job};
use uuid::Uuid;

use super::columns::*;
use super::*;
use crate::embed::Embedder;
use crate::search::when;

pub(super) async fn pass(db: &Db, embedder: &Embedder) -> Result<Option<(usize, usize)>, String> {
    let mut tx = begin(db, Job::Indexer).await.map_err(|e| e.to_string())?;
    let claimed = sqlx::query_as!(
        Claimed,
        "SELECT tenant_id, user_id, id, kind, memory_id, session_id, message_id, task_id,
                task_source, task_seq
         FROM embedding_outbox
         WHERE not_before <= now()
         ORDER BY not_before, id
         LIMIT $1
         FOR UPDATE SKIP LOCKED",
        BATCH_ROWS
    )
    .fetch_all(&mut tx)
    .await
    .map_err(|e| e.to_string())?;
    if claimed.is_empty() {
        return Ok(None);
    }
    let memories: Vec<&Claimed> = claimed.iter().filter(|c| c.kind == "memory").collect();
    let messages: Vec<&Claimed> = claimed.iter().filter(|c| c.kind == "message").collect();
    let m_tenants: Vec<&str> = memories.iter().map(|c| c.tenant_id.as_str()).collect();
    let m_users: Vec<&str> = memories.iter().map(|c| c.user_id.as_str()).collect();
    let m_ids: Vec<Uuid> = memories.iter().filter_map(|c| c.memory_id).collect();
    let s_tenants: Vec<&str> = messages.iter().map(|c| c.tenant_id.as_str()).collect();
    let s_users: Vec<&str> = messages.iter().map(|c| c.user_id.as_str()).collect();
    let s_sessions: Vec<&str> = messages
        .iter()
        .filter_map(|c| c.session_id.as_deref())
        .collect();
    let s_messages: Vec<&str> = messages
        .iter()
        .filter_map(|c| c.message_id.as_deref())
        .collect();
    let tasks = TaskItems::of(claimed.iter());
    let (t_tenants, t_users, t_ids, t_sources, t_seqs) = tasks.columns();
    // The text of each claimed row that still exists (a deleted memory or message has nothing
    // left to embed; its row just goes, and so do the vectors of a message left without text).
    let texts = sqlx::query_as!(
        Text,
        r#"SELECT DISTINCT c.tenant_id AS "tenant_id!", c.user_id AS "user_id!",
                c.memory_id AS "memory_id?", c.byte_start AS "byte_start?",
                NULL::text AS "session_id?", NULL::text AS "message_id?", NULL::uuid AS "task_id?",
                NULL::text AS "task_source?", NULL::int8 AS "task_seq?",
                NULL::int4 AS "part_index?", NULL::int4 AS "char_offset?",
                left(c.content, $4) AS "content!",
                CASE WHEN c.byte_start > 0 THEN (
                    SELECT right(p.content, $10) FROM agent_memory_chunks p
                    WHERE p.tenant_id = c.tenant_id AND p.user_id = c.user_id
                      AND p.memory_id = c.memory_id AND p.byte_start < c.byte_start
                    ORDER BY p.byte_start DESC LIMIT 1
                ) ELSE (
                    SELECT right(pc.content, $10)
                    FROM agent_memories me
                    JOIN LATERAL (
                        SELECT pm.id FROM agent_memories pm
                        WHERE pm.tenant_id = me.tenant_id AND pm.user_id = me.user_id
                          AND mnemo_same_stream(pm.agent_id, pm.thread_id, me.agent_id, me.thread_id)
                          AND (pm.created_at, pm.id) < (me.created_at, me.id)
                        ORDER BY pm.created_at DESC, pm.id DESC LIMIT 1
                    ) prev ON true
                    JOIN LATERAL (
                        SELECT p.content FROM agent_memory_chunks p
                        WHERE p.tenant_id = me.tenant_id AND p.user_id = me.user_id
                          AND p.memory_id = prev.id
                        ORDER BY p.byte_start DESC LIMIT 1
                    ) pc ON true
                    WHERE me.tenant_id = c.tenant_id AND me.user_id = c.user_id
                      AND me.id = c.memory_id
                ) END AS "context?"
         FROM unnest($1::text[], $2::text[], $3::uuid[]) AS o(tenant_id, user_id, memory_id)
         JOIN LATERAL (
             SELECT * FROM agent_memory_chunks c
             WHERE c.tenant_id = o.tenant_id AND c.user_id = o.user_id
               AND c.memory_id = o.memory_id
             ORDER BY c.byte_start
             LIMIT $5
         ) c ON true
         UNION ALL
         SELECT DISTINCT m.tenant_id, m.user_id, NULL::uuid, NULL::int8, m.session_id,
                m.message_id, NULL::uuid, NULL::text, NULL::int8, NULL::int4, NULL::int4,
                left(m.text, $4),
                (SELECT right(p.text, $10) FROM conversation_messages p
                 WHERE p.tenant_id = m.tenant_id AND p.user_id = m.user_id
                   AND p.session_id = m.session_id AND (p.sent_at, p.seq) < (m.sent_at, m.seq)
                   AND p.sender IN ('user', 'ai') AND p.text <> ''
                 ORDER BY p.sent_at DESC, p.seq DESC LIMIT 1)
         FROM unnest($6::text[], $7::text[], $8::text[], $9::text[])
                  AS o(tenant_id, user_id, session_id, message_id)
         JOIN conversation_messages m
           ON m.tenant_id = o.tenant_id AND m.user_id = o.user_id
          AND m.session_id = o.session_id AND m.message_id = o.message_id
         -- An update can leave a message with no text: its old vectors go, no new ones come.
         WHERE m.sender IN ('user', 'ai') AND m.text <> ''
         UNION ALL
         SELECT x.tenant_id, x.user_id, NULL::uuid, NULL::int8, NULL::text, NULL::text,
                x.task_id, x.source, x.seq, x.part_index, x.char_offset, left(x.content, $4),
                x.context
         FROM unnest($11::text[], $12::text[], $13::uuid[], $14::text[], $15::int8[])
                  AS o(tenant_id, user_id, task_id, source, seq)
         JOIN LATERAL (
             -- A task message, with the one before it as its context.
             SELECT m.tenant_id, m.user_id, m.task_id, 'message'::text AS source,
                    m.seq::int8 AS seq, -1 AS part_index, -1 AS char_offset, m.content,
                    (SELECT right(p.content, $10) FROM task_messages p
                     WHERE p.tenant_id = m.tenant_id AND p.user_id = m.user_id
                       AND p.task_id = m.task_id AND p.seq < m.seq
                     ORDER BY p.seq DESC LIMIT 1) AS context
             FROM task_messages m
             WHERE o.source = 'message' AND m.tenant_id = o.tenant_id
               AND m.user_id = o.user_id AND m.task_id = o.task_id AND m.seq = o.seq
             UNION ALL
             SELECT e.tenant_id, e.user_id, e.task_id, 'event', e.seq, -1, -1,
                    mnemo_task_event_text(e.step_narrative, e.tool_name, e.result_data,
                                          e.error_info),
                    NULL
             FROM task_events e
             WHERE o.source = 'event' AND e.tenant_id = o.tenant_id
               AND e.user_id = o.user_id AND e.task_id = o.task_id AND e.seq = o.seq
             UNION ALL
             SELECT s.tenant_id, s.user_id, s.task_id, 'snapshot', s.seq, -1, -1,
                    s.label || E'\n' || s.content, NULL
             FROM task_snapshots s
             WHERE o.source = 'snapshot' AND s.tenant_id = o.tenant_id
               AND s.user_id = o.user_id AND s.task_id = o.task_id AND s.seq = o.seq
             UNION ALL
             (SELECT t.tenant_id, t.user_id, t.task_id, t.kind, t.seq, t.part_index,
                     t.char_offset, t.content, NULL
              FROM task_step_texts t
              WHERE o.source = 'step' AND t.tenant_id = o.tenant_id
                AND t.user_id = o.user_id AND t.task_id = o.task_id AND t.seq = o.seq
              ORDER BY t.part_index, t.chunk
              LIMIT $5)
         ) x ON true
         WHERE btrim(x.content) <> ''"#,
        &m_tenants as &[&str],
        &m_users as &[&str],
        &m_ids,
        i32::try_from(MAX_CHARS).unwrap_or(i32::MAX),
        MAX_CHUNKS_PER_MEMORY,
        &s_tenants as &[&str],
        &s_users as &[&str],
        &s_sessions as &[&str],
        &s_messages as &[&str],
        CONTEXT_CHARS,
        &t_tenants as &[&str],
        &t_users as &[&str],
        &t_ids,
        &t_sources as &[&str],
        &t_seqs
    )
    .fetch_all(&mut tx)
    .await
    .map_err(|e| e.to_string())?;

    // Big memories bring many chunks: keep the claimed rows (in order, at least one) whose texts
    // fit one embedding batch; the rest stay queued for the next pass.
    let mut kept = 0usize;
    let mut total = 0usize;
    for row in &claimed {
        let n = texts.iter().filter(|t| belongs(t, row)).count();
        if kept > 0 && total + n > MAX_TEXTS_PER_PASS {
            break;
        }
        kept += 1;
        total += n;
    }
    let claimed = &claimed[..kept];
    let texts: Vec<Text> = texts
        .into_iter()
        .filter(|t| claimed.iter().any(|row| belongs(t, row)))
        .collect();
    let ids: Vec<i64> = claimed.iter().map(|c| c.id).collect();
    let m_ids: Vec<Uuid> = claimed.iter().filter_map(|c| c.memory_id).collect();
    let m_tenants: Vec<&str> = claimed
        .iter()
        .filter(|c| c.memory_id.is_some())
        .map(|c| c.tenant_id.as_str())
        .collect();
    let m_users: Vec<&str> = claimed
        .iter()
        .filter(|c| c.memory_id.is_some())
        .map(|c| c.user_id.as_str())
        .collect();
    // Each text alone, and (when something precedes it) with its context: a search scores a
    // text by the mean of the two (see `crate::search::fusion`).
    let mut inputs: Vec<(usize, bool)> = Vec::with_capacity(texts.len() * 2);
    let mut contents: Vec<String> = Vec::with_capacity(texts.len() * 2);
    for (i, t) in texts.iter().enumerate() {
        let text = read_by_the_model(&t.content);
        inputs.push((i, false));
        contents.push(text.to_owned());
        if let Some(context) = t.context.as_deref().filter(|c| !c.trim().is_empty()) {
            inputs.push((i, true));
            contents.push(format!("{context}\n{text}"));
        }
    }
    let vectors = match embed_all(embedder, &contents).await {
        Ok(vectors) => vectors,
        Err(err) => {
            // Schedule the rows again, later each time; the claim ends with this commit.
            sqlx::query!(
                "UPDATE embedding_outbox
                 SET attempts = attempts + 1, last_error = left($2, 1000),
                     not_before = now() + make_interval(secs => least($3, 2 ^ least(attempts, 20)))
                 WHERE id = ANY($1)",
                &ids,
                err,
                MAX_BACKOFF_SECS as f64
            )
            .execute(&mut tx)
            .await
            .map_err(|e| e.to_string())?;
            tx.commit().await.map_err(|e| e.to_string())?;
            return Err(err);
        }
    };

    let model = embedder.model_id();
    sqlx::query!(
        "DELETE FROM memory_vectors v
         USING unnest($1::text[], $2::text[], $3::uuid[]) AS o(tenant_id, user_id, memory_id)
         WHERE v.tenant_id = o.tenant_id AND v.user_id = o.user_id
           AND v.memory_id = o.memory_id AND v.model = $4",
        &m_tenants as &[&str],
        &m_users as &[&str],
        &m_ids,
        model
    )
    .execute(&mut tx)
    .await
    .map_err(|e| e.to_string())?;
    let s_tenants: Vec<&str> = claimed
        .iter()
        .filter(|c| c.session_id.is_some())
        .map(|c| c.tenant_id.as_str())
        .collect();
    let s_users: Vec<&str> = claimed
        .iter()
        .filter(|c| c.session_id.is_some())
        .map(|c| c.user_id.as_str())
        .collect();
    let s_sessions: Vec<&str> = claimed
        .iter()
        .filter_map(|c| c.session_id.as_deref())
        .collect();
    let s_messages: Vec<&str> = claimed
        .iter()
        .filter_map(|c| c.message_id.as_deref())
        .collect();
    sqlx::query!(
        "DELETE FROM message_vectors v
         USING unnest($1::text[], $2::text[], $3::text[], $4::text[])
               AS o(tenant_id, user_id, session_id, message_id)
         WHERE v.tenant_id = o.tenant_id AND v.user_id = o.user_id
           AND v.session_id = o.session_id AND v.message_id = o.message_id AND v.model = $5",
        &s_tenants as &[&str],
        &s_users as &[&str],
        &s_sessions as &[&str],
        &s_messages as &[&str],
        model
    )
    .execute(&mut tx)
    .await
    .map_err(|e| e.to_string())?;
    let tasks = TaskItems::of(claimed.iter());
    let (t_tenants, t_users, t_ids, t_sources, t_seqs) = tasks.columns();
    sqlx::query!(
        "DELETE FROM task_vectors v
         USING unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::int8[])
               AS o(tenant_id, user_id, task_id, source, seq)
         WHERE v.tenant_id = o.tenant_id AND v.user_id = o.user_id AND v.task_id = o.task_id
           AND v.seq = o.seq AND v.model = $6
           AND (v.source = o.source
                OR (o.source = 'step' AND v.source IN ('step_text', 'tool_result')))",
        &t_tenants as &[&str],
        &t_users as &[&str],
        &t_ids,
        &t_sources as &[&str],
        &t_seqs,
        model
    )
    .execute(&mut tx)
    .await
    .map_err(|e| e.to_string())?;
    let mut chunks: Vec<Embedded> = Vec::new();
    let mut notes: Vec<Embedded> = Vec::new();
    let mut items: Vec<Embedded> = Vec::new();
    for (&(i, with_context), v) in inputs.iter().zip(vectors) {
        let t = &texts[i];
        let group = if t.memory_id.is_some() {
            &mut chunks
        } else if t.task_id.is_some() {
            &mut items
        } else {
            &mut notes
        };
        group.push((t, with_context, v));
    }
    if !chunks.is_empty() {
        // Runtime: it binds pgvector's `vector[]`, a type sqlx's macros do not know.
        sqlx::query(
            "INSERT INTO memory_vectors
                 (tenant_id, user_id, memory_id, byte_start, model, with_context, embedding)
             SELECT u.tenant_id, u.user_id, u.memory_id, u.byte_start, $6, u.with_context,
                    u.embedding
             FROM unnest($1::text[], $2::text[], $3::uuid[], $4::int8[], $5::vector[], $7::bool[])
                  AS u(tenant_id, user_id, memory_id, byte_start, embedding, with_context)
             ON CONFLICT DO NOTHING",
        )
        .bind(column(&chunks, |t| t.tenant_id.as_str()))
        .bind(column(&chunks, |t| t.user_id.as_str()))
        .bind(present(&chunks, |t| t.memory_id))
        .bind(column(&chunks, |t| t.byte_start.unwrap_or(0)))
        .bind(embeddings(&chunks))
        .bind(model)
        .bind(contexts(&chunks))
        .execute(&mut tx)
        .await
        .map_err(|e| e.to_string())?;
    }
    if !notes.is_empty() {
        // Runtime: it binds pgvector's `vector[]`, a type sqlx's macros do not know.
        sqlx::query(
            "INSERT INTO message_vectors
                 (tenant_id, user_id, session_id, message_id, model, with_context, embedding)
             SELECT u.tenant_id, u.user_id, u.session_id, u.message_id, $6, u.with_context,
                    u.embedding
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::vector[], $7::bool[])
                  AS u(tenant_id, user_id, session_id, message_id, embedding, with_context)
             ON CONFLICT DO NOTHING",
        )
        .bind(column(&notes, |t| t.tenant_id.as_str()))
        .bind(column(&notes, |t| t.user_id.as_str()))
        .bind(present(&notes, |t| t.session_id.as_deref()))
        .bind(present(&notes, |t| t.message_id.as_deref()))
        .bind(embeddings(&notes))
        .bind(model)
        .bind(contexts(&notes))
        .execute(&mut tx)
        .await
        .map_err(|e| e.to_string())?;
    }
    if !items.is_empty() {
        // Runtime: it binds pgvector's `vector[]`, a type sqlx's macros do not know.
        sqlx::query(
            "INSERT INTO task_vectors (tenant_id, user_id, task_id, source, seq, part_index,
                                       char_offset, model, with_context, embedding)
             SELECT u.tenant_id, u.user_id, u.task_id, u.source, u.seq, u.part_index,
                    u.char_offset, $8, u.with_context, u.embedding
             FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::int8[], $6::int4[],
                         $7::int4[], $9::bool[], $10::vector[])
                  AS u(tenant_id, user_id, task_id, source, seq, part_index, char_offset,
                       with_context, embedding)
             ON CONFLICT DO NOTHING",
        )
        .bind(column(&items, |t| t.tenant_id.as_str()))
        .bind(column(&items, |t| t.user_id.as_str()))
        .bind(present(&items, |t| t.task_id))
        .bind(column(&items, |t| {
            t.task_source.as_deref().unwrap_or_default()
        }))
        .bind(column(&items, |t| t.task_seq.unwrap_or(0)))
        .bind(column(&items, |t| t.part_index.unwrap_or(-1)))
        .bind(column(&items, |t| t.char_offset.unwrap_or(-1)))
        .bind(model)
        .bind(contexts(&items))
        .bind(embeddings(&items))
        .execute(&mut tx)
        .await
        .map_err(|e| e.to_string())?;
    }
    sqlx::query!("DELETE FROM embedding_outbox WHERE id = ANY($1)", &ids)
        .execute(&mut tx)
        .await
        .map_err(|e| e.to_string())?;
    tx.commit().await.map_err(|e| e.to_string())?;
    Ok(Some((claimed.len(), texts.len())))
}

/// What the model reads of a text: all of it but a date or clock stamp opening it
/// ([`when::without_stamp`]), unless that is all there is. A log writes such a stamp on each of
/// its texts (`2024-03-02 Maya: ...`), so every text of a day shares those tokens, and the model
/// puts them nearer each other than their words say; a question holds no stamp. Keyword search
/// and the time lift still read the stamp.
fn read_by_the_model(content: &str) -> &str {
    let rest = when::without_stamp(content);
    if rest.trim().is_empty() {
        content
    } else {
        rest
    }
}
