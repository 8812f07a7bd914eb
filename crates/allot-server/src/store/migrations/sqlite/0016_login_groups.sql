-- Allot store schema, version 16: a session opened through single sign-on
-- (OpenID Connect) keeps the group names the provider's ID token gave
-- (a JSON array); the person's grants come from them instead of the
-- host's Unix groups. NULL: the Unix groups (munge, login socket).
ALTER TABLE logins ADD COLUMN groups TEXT;
