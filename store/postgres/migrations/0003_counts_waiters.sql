-- What keeps a replay a read: the attempts that changed nothing but the
-- count are counted by each gateway and flushed in batches into the
-- unlogged table counts, one row per record incarnation (epoch) and
-- gateway engine; a record's attempts are records.attempts plus its
-- counts. Unlogged: no WAL, and emptied by crash recovery (a clean
-- shutdown keeps it), so after a crash of Postgres the counts flushed
-- since show fewer attempts than there were; nothing else depends on
-- them. waiters marks a record a duplicate found in flight, so that
-- only its completion, release or hold sends a notice.
ALTER TABLE records
    ADD COLUMN epoch   bigint NOT NULL DEFAULT 0,    -- from fences when the record is written anew
    ADD COLUMN waiters boolean NOT NULL DEFAULT false; -- a duplicate found it in flight

CREATE UNLOGGED TABLE counts (
    rid       text NOT NULL,   -- the record's id
    repoch    bigint NOT NULL, -- its epoch
    engine    bigint NOT NULL, -- the gateway engine that counted
    n         bigint NOT NULL, -- attempts counted by that engine, in all
    expire_at bigint NOT NULL, -- the record's expiry when last counted
    PRIMARY KEY (rid, repoch, engine)
);
CREATE INDEX counts_expire ON counts (expire_at);

-- The gateways where a waiter needs notices now (store.Notices.Need),
-- each until a time it renews while one does: while any row is live,
-- every completion, release and hold sends its notice, whether or not
-- a duplicate marked the record.
CREATE UNLOGGED TABLE listeners (
    engine bigint PRIMARY KEY,
    until  bigint NOT NULL
);
