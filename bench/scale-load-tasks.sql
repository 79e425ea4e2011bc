-- The rest of the histories of `scripts/bench --scale` (next to bench/scale-load.sql): for one
-- user (psql -v user=...) of tenant `bench`, a long task and notes at the size cap.
--
-- The task has the fixed id 00000000-0000-7000-8000-5ca1e0000001 (the key of a task is
-- (tenant, user, id), so every bench user has its own under the same id), a plan of six steps,
-- `messages` progress messages and `events` execution-log events. The defaults, 99,967 messages
-- and 100,000 events, are the 100x history; `-v messages=1023 -v events=1000` is the small
-- user's. The message count is one short of a multiple of 64 on purpose: the digest of "where
-- was I?" keeps a folded state of the messages, written by the service on every 64th message
-- (src/tasks/digest_state.rs), so the one message the bench's `task-query` posts through the API
-- before measuring folds them all once, and every question after reads that state and the few
-- messages since, as a service that took these messages one by one would.
--
-- The rows are what the service would have written: the task registered with its plan
-- (PLANNING_COMPLETED), then moved to EXECUTING_PLAN (its first message is the lifecycle note of
-- that move), its counters equal to the messages and events it holds, and its running summary
-- current (covering every message, as the background refresh leaves it), so that appends through
-- the API carry on from here. The loaded counts are kept in the task's metadata
-- (`bench_loaded_messages`, `bench_loaded_events`), for bench/scale-reset.sql.
--
-- The notes are those of the agent `bench`: `notes_bytes` bytes of Markdown in sections, just
-- under the default cap MNEMO_NOTES_MAX_BYTES (64 KiB) for the 100x user, `-v notes_bytes=655`
-- (a hundredth) for the small one, as one overwrite (version 1 and its revision).
--
-- Runs as the superuser (no row-level security in the way), in one transaction; replaces what an
-- earlier load of this file left for the user. Then ANALYZE unless `-v analyze=0`.
\set ON_ERROR_STOP on
\if :{?messages}
\else
\set messages 99967
\endif
\if :{?events}
\else
\set events 100000
\endif
\if :{?notes_bytes}
\else
\set notes_bytes 65500
\endif
\if :{?analyze}
\else
\set analyze 1
\endif
\set task '00000000-0000-7000-8000-5ca1e0000001'
BEGIN;
-- Messages, events, the plan and the digest state go with the task (ON DELETE CASCADE).
DELETE FROM tasks WHERE tenant_id = 'bench' AND user_id = :'user' AND id = :'task';
DELETE FROM embedding_outbox WHERE tenant_id = 'bench' AND user_id = :'user' AND task_id = :'task';

-- Registered on 2026-06-01 with its plan, executing since a minute later; the last change now, so
-- that the lifecycle sweeper, which pauses an active task after a day without updates, leaves it
-- as it is during the run (bench/scale-reset.sql brings it back if it did not).
INSERT INTO tasks (tenant_id, user_id, id, name, original_user_task, status, phase, metadata,
                   running_summary, summary_message_count, summary_updated_at, plan_version,
                   event_count, message_count, snapshot_count, created_at, plan_generated_at,
                   execution_started_at, updated_at)
VALUES ('bench', :'user', :'task', 'nightly release of the acme app',
        'Build, test and ship the nightly release of the acme app to staging and production',
        'active', 'EXECUTING_PLAN',
        jsonb_build_object('bench_loaded_messages', :messages, 'bench_loaded_events', :events),
        'Building and shipping the nightly release: images built and pushed, staging deploys '
            || 'retried after cache timeouts; production rollout in progress.',
        :messages, now(), 1, :events, :messages, 0, timestamptz '2026-06-01',
        timestamptz '2026-06-01', timestamptz '2026-06-01 00:01', now());

INSERT INTO task_plans (tenant_id, user_id, task_id, version, plan, created_at)
VALUES ('bench', :'user', :'task', 1,
        '["Build image", "Run the integration tests", "Push image to registry", "Deploy to staging", "Run the smoke tests", "Roll out to production"]',
        timestamptz '2026-06-01');
-- Item ids as the service makes them (UUIDv7, see bench/scale-load.sql).
INSERT INTO task_plan_items (tenant_id, user_id, task_id, version, ordinal, id, title)
SELECT 'bench', :'user', :'task', 1, o,
       (lpad(to_hex(extract(epoch FROM timestamptz '2026-06-01')::int8 * 1000 + o), 12, '0')
        || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid,
       (ARRAY['Build image', 'Run the integration tests', 'Push image to registry',
              'Deploy to staging', 'Run the smoke tests', 'Roll out to production'])[o]
FROM generate_series(1, 6) o;

-- Message 1 is the note of the move to EXECUTING_PLAN; the others are the agent's progress
-- reports (now and then the user's word), two seconds apart, on the step the task is at (each
-- sixth of the history one step), with the versions, hosts, ports and images a digest picks up as
-- key details. A step's last message says it is done.
INSERT INTO task_messages (tenant_id, user_id, task_id, seq, role, content, msg_type, created_at)
SELECT 'bench', :'user', :'task', i,
       CASE WHEN i = 1 THEN 'system' WHEN i % 50 = 0 THEN 'user' ELSE 'agent' END,
       CASE
           WHEN i = 1 THEN 'phase: PLANNING_COMPLETED → EXECUTING_PLAN'
           WHEN step < 6 AND (i * 6) / :messages <> ((i + 1) * 6) / :messages
               THEN 'Step ' || step || ' done: ' || title || ' finished for build ' || i
           WHEN i % 50 = 0 THEN (ARRAY['please keep the old index until the rollback window closes',
                                       'is staging still on the previous image?',
                                       'skip the flaky cache test for now',
                                       'ping me when production is half rolled out'])[1 + (i / 50) % 4]
           ELSE (ARRAY[
               'checked the logs of build ' || i || ', quiet on port ' || (8000 + i % 50),
               'ran the integration tests for v1.' || (i / 1000) || '.' || (i % 1000) || ': '
                   || (200 + i % 37) || ' passed, ' || (i % 3) || ' skipped',
               'pushed ghcr.io/acme/app:v1.' || (i / 1000) || '.' || (i % 1000) || ' to the registry',
               'deploy to staging-' || (i % 4) || '.acme.internal took ' || (10 + i % 90) || ' s',
               'cache warm-up timed out on web-' || (i % 12) || ', retrying in ' || (5 + i % 25) || ' s',
               'migration ' || (20260600 + i % 400) || ' applied, index rebuilt in ' || (1 + i % 40) || ' s',
               'latency p95 at ' || (80 + i % 120) || ' ms on web-' || (i % 12) || ', within budget',
               'waiting for the quota of the build runners, ' || (i % 9) || ' jobs ahead'])[1 + i % 8]
               || ' (' || title || ')'
       END,
       CASE WHEN i = 1 THEN 'lifecycle' WHEN i % 50 = 0 THEN 'text' ELSE 'progress' END,
       timestamptz '2026-06-01 00:01' + i * interval '2 seconds'
FROM (SELECT i, least(6, 1 + (i * 6) / :messages) AS step FROM generate_series(1, :messages) i) s
CROSS JOIN LATERAL (SELECT (ARRAY['Build image', 'Run the integration tests',
                                  'Push image to registry', 'Deploy to staging',
                                  'Run the smoke tests', 'Roll out to production'])[s.step] AS title) t;

-- The execution log: the tool calls of each step, most completed, some failed with their error,
-- one second apart.
INSERT INTO task_events (tenant_id, user_id, task_id, seq, ts, stage, sub_task_id, step_narrative,
                         tool_name, status, input_payload, result_data, error_info, duration_ms,
                         created_at)
SELECT 'bench', :'user', :'task', e, timestamptz '2026-06-01 00:01' + e * interval '1 second',
       to_jsonb(step), 'sub-' || step || '-' || (e % 7),
       (ARRAY['build the image layer ' || (e % 40), 'run test shard ' || (e % 16),
              'push layer sha256:' || substr(md5(e::text), 1, 12),
              'apply the manifest to staging-' || (e % 4), 'probe /healthz on web-' || (e % 12),
              'shift ' || (5 + e % 20) || '% of traffic to the new pods'])[step],
       (ARRAY['cli', 'cli', 'cli', 'kubectl', 'http', 'kubectl'])[step],
       CASE WHEN e % 23 = 0 THEN 'FAILED' ELSE 'COMPLETED' END,
       jsonb_build_object('cmd', (ARRAY['docker build .', 'cargo test', 'docker push',
                                        'kubectl apply -f staging.yaml', 'curl -f /healthz',
                                        'kubectl rollout'])[step], 'attempt', 1 + e % 3),
       CASE WHEN e % 23 = 0 THEN NULL
            ELSE jsonb_build_object('exit', 0, 'lines', 10 + e % 300) END,
       CASE WHEN e % 23 = 0 THEN jsonb_build_object('errorMessage',
                'timed out after ' || (30 + e % 60) || ' s on web-' || (e % 12)) END,
       20 + (e * 37) % 4000,
       timestamptz '2026-06-01 00:01' + e * interval '1 second'
FROM (SELECT e, least(6, 1 + (e * 6) / :events) AS step FROM generate_series(1, :events) e) s;

-- The notes: sections of a project's working notes, cut at the last whole line within
-- `notes_bytes` (the text is ASCII: a character is a byte).
CREATE TEMP TABLE scale_notes ON COMMIT DROP AS
SELECT substring(doc FROM 1 FOR :notes_bytes - position(E'\n' IN reverse(left(doc, :notes_bytes))) + 1)
           AS notes
FROM (SELECT E'# Working notes\n\n' || string_agg(
          '## ' || (ARRAY['Deploys', 'Build runners', 'Staging', 'Caches', 'Migrations',
                          'Incidents', 'People', 'Preferences'])[1 + k % 8] || ' ' || (k / 8 + 1)
          || E'\n\n- the nightly build of week ' || k || ' ran on runner-' || (k % 9)
          || E' and took ' || (12 + k % 30) || E' minutes\n- staging-' || (k % 4)
          || E'.acme.internal serves v1.' || k || E' behind the blue pool\n- keep the old index for '
          || (k % 5 + 2) || E' days after a migration before dropping it\n- web-' || (k % 12)
          || E' times out on a cold cache; warm it before shifting traffic\n- the user prefers '
          || (ARRAY['short status lines', 'one summary a day', 'links to the build logs',
                    'numbers over adjectives'])[1 + k % 4] || E'\n\n', '' ORDER BY k) AS doc
      FROM generate_series(0, :notes_bytes / 300 + 2) k) d;

INSERT INTO agent_long_term_memory (tenant_id, user_id, agent_name, notes, version, created_at,
                                    updated_at)
SELECT 'bench', :'user', 'bench', notes, 1, timestamptz '2026-06-01', timestamptz '2026-06-01'
FROM scale_notes
ON CONFLICT (tenant_id, user_id, agent_name)
DO UPDATE SET notes = EXCLUDED.notes, version = EXCLUDED.version,
              created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at;
DELETE FROM agent_long_term_memory_revisions
WHERE tenant_id = 'bench' AND user_id = :'user' AND agent_name = 'bench';
INSERT INTO agent_long_term_memory_revisions (tenant_id, user_id, agent_name, version, operation,
                                              notes, size_bytes, created_at)
SELECT 'bench', :'user', 'bench', 1, 'overwrite', notes, octet_length(notes),
       timestamptz '2026-06-01'
FROM scale_notes;
COMMIT;

\if :analyze
ANALYZE tasks;
ANALYZE task_plans;
ANALYZE task_plan_items;
ANALYZE task_messages;
ANALYZE task_events;
ANALYZE agent_long_term_memory;
\endif
