-- Who the caller is, as the database sees it once the call acts as them: the tenant and user
-- that row-level security reads. `GET /api/me` runs it in one statement outside any transaction
-- block, like every hot read, instead of a scoped transaction's four.
CREATE FUNCTION mnemo_read_me(p_tenant text, p_user text)
RETURNS TABLE (tenant_id text, user_id text)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    RETURN QUERY SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user');
END
$$;

-- Every one-call function plans generically (no statement here reads a table, but the rule is
-- kept for all of them).
ALTER FUNCTION mnemo_read_me SET plan_cache_mode = force_generic_plan;
