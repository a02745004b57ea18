-- The records, one row each, and the deployment secret. Times are the
-- database clock in milliseconds since the epoch (0: none); a record is
-- gone once expire_at has passed, whether or not the sweep deleted it.
CREATE SEQUENCE fences;

CREATE TABLE records (
    id                text PRIMARY KEY,
    route             text NOT NULL DEFAULT '',
    operation         text NOT NULL DEFAULT '',
    fingerprint       text NOT NULL DEFAULT '',
    fingerprint_rule  text NOT NULL DEFAULT '',
    state             text NOT NULL,           -- in_flight, completed, unknown, released
    token             text NOT NULL,           -- the claimant's fencing token
    fence             bigint NOT NULL,         -- from the sequence fences, at each execution's claim
    started_at        bigint NOT NULL,
    completed_at      bigint NOT NULL DEFAULT 0,
    lease_until       bigint NOT NULL DEFAULT 0,
    attempts          bigint NOT NULL DEFAULT 1,
    executions        bigint NOT NULL DEFAULT 1,
    status            integer NOT NULL DEFAULT 0,
    header            text NOT NULL DEFAULT '',
    body              bytea,
    body_omitted      boolean NOT NULL DEFAULT false,
    digest            text NOT NULL DEFAULT '',
    external_id       text NOT NULL DEFAULT '',
    reason            text NOT NULL DEFAULT '',
    audit             text NOT NULL DEFAULT '', -- JSON
    check_method      text NOT NULL DEFAULT '',
    check_url         text NOT NULL DEFAULT '',
    check_after       bigint NOT NULL DEFAULT 0,
    check_match       text NOT NULL DEFAULT '',
    checks            text NOT NULL DEFAULT '', -- JSON
    check_count       bigint NOT NULL DEFAULT 0,
    next_check        bigint NOT NULL DEFAULT 0,
    not_found_streak  bigint NOT NULL DEFAULT 0,
    check_lease_until bigint NOT NULL DEFAULT 0,
    check_token       text NOT NULL DEFAULT '',
    not_found_at      bigint NOT NULL DEFAULT 0,
    not_done          bigint NOT NULL DEFAULT 0,
    unknowns          bigint NOT NULL DEFAULT 0,
    answers           text NOT NULL DEFAULT '', -- JSON
    request           bytea,
    expire_at         bigint NOT NULL,
    claimed_at        bigint NOT NULL DEFAULT 0, -- the clock at the last claim
    claim_outcome     smallint NOT NULL DEFAULT 0 -- what the last claim did: 0 counted, 1 created, 2 took over
);

-- The state indexes of the operator queue and the console.
CREATE INDEX records_state ON records (state, id);
-- The expiry sweep.
CREATE INDEX records_expire ON records (expire_at);

CREATE TABLE secret (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    value bytea NOT NULL
);
