-- Tables for bench/run's memory check (schema p_mem). :rows is the number of
-- users that idem_versioned_update will update once each.
CREATE SCHEMA p_mem;
CREATE TABLE p_mem.mem_log (
    order_id bigint PRIMARY KEY,
    user_id  int NOT NULL,
    points   int NOT NULL);
CREATE TABLE p_mem.mem_users (
    id      int PRIMARY KEY,
    points  bigint NOT NULL DEFAULT 0,
    version bigint NOT NULL DEFAULT 0);
INSERT INTO p_mem.mem_users (id) SELECT g FROM generate_series(1, :rows) g;
VACUUM ANALYZE p_mem.mem_users;
