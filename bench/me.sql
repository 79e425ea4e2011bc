-- GET /api/me's database work: the one call the request sends, which acts as the caller and
-- reads the tenant and user back, outside any transaction.
SELECT * FROM mnemo_read_me('bench', 'u' || (:client_id % 16));
