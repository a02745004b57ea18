-- The check value of the deployment secret the records are made under
-- (an HMAC of a fixed label under it, never the secret), written by the
-- first gateway: one whose secret gives another value refuses to start.
CREATE TABLE secret_check (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    value   bytea NOT NULL,
    made_at timestamptz NOT NULL DEFAULT now()
);
