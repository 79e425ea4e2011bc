-- The notes read names the copy its server already holds, so that unchanged notes are not sent
-- again. Notes are read on every turn of an agent and change far less often, and at the size cap
-- (64 KiB) reading them whole was most of a read's cost: the text fetched from its TOAST table
-- and decompressed, copied into the function's result, sent to the server, checked as UTF-8 and
-- escaped into JSON there, on every read.
--
-- A held copy is named by the row's version and the transaction that wrote the row (`xmin`).
-- Every write of the service moves the version; `xmin` moves with any change of the row at all,
-- a fix made by hand in SQL included, and it tells a row apart from an older one of the same
-- version (notes erased and written anew). When both still match, `notes` comes back NULL and
-- the text is not read; otherwise the row comes back whole. The caller is still checked on
-- every read, under row-level security as before: the held copy is only ever given to a caller
-- the database has just shown the same row to.
DROP FUNCTION mnemo_read_notes(text, text, text);

CREATE FUNCTION mnemo_read_notes(
    p_agent text, p_held_version bigint, p_held_row bigint, p_tenant text, p_user text)
RETURNS TABLE (notes text, version bigint, row_xid bigint, created_at timestamptz,
               updated_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    RETURN QUERY
    SELECT CASE WHEN n.version = $2 AND n.xmin::text::bigint = $3 THEN NULL ELSE n.notes END,
           n.version, n.xmin::text::bigint, n.created_at, n.updated_at
    FROM agent_long_term_memory n
    WHERE n.tenant_id = current_setting('mnemo.tenant')
      AND n.user_id = current_setting('mnemo.user') AND n.agent_name = $1;
END
$$;

ALTER FUNCTION mnemo_read_notes SET plan_cache_mode = force_generic_plan;
