-- What outlives a record (see store/tombstone.go): the tombstone of a
-- completed record, kept past it, and the twin entries that name the
-- record completed last with a payload digest. Each is gone once
-- expire_at has passed; the sweep deletes them as it deletes records.
CREATE TABLE tombstones (
    id           text PRIMARY KEY,
    completed_at bigint NOT NULL,
    status       integer NOT NULL,
    reason       text NOT NULL DEFAULT '',
    expire_at    bigint NOT NULL
);
CREATE INDEX tombstones_expire ON tombstones (expire_at);

CREATE TABLE twins (
    twin         text PRIMARY KEY,
    id           text NOT NULL,
    completed_at bigint NOT NULL,
    expire_at    bigint NOT NULL
);
CREATE INDEX twins_expire ON twins (expire_at);
