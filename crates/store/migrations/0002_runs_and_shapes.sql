-- Measurement store, version 2. Append-only: version 1 stays as it was written; this file only adds.
--
-- Hosts: the CPU identity a run was taken on, so an import from another machine keeps where it came from.
CREATE TABLE host (
    id                 INTEGER PRIMARY KEY,
    cpu_model          TEXT NOT NULL,
    physical_cores     INTEGER NOT NULL CHECK (physical_cores >= 0),
    memory_total_bytes INTEGER NOT NULL CHECK (memory_total_bytes >= 0),
    hostname           TEXT NOT NULL DEFAULT '',
    UNIQUE (cpu_model, physical_cores, memory_total_bytes, hostname)
);

-- Devices: version 1's UNIQUE (profile, name, uuid) lets rows without a UUID repeat (NULLs are distinct in
-- SQLite); fold such repeats into the oldest row, then key the identity with the UUID read as ''.
UPDATE measurement SET device_id = (
    SELECT min(d2.id) FROM device d1 JOIN device d2
        ON d2.profile = d1.profile AND d2.name = d1.name AND ifnull(d2.uuid, '') = ifnull(d1.uuid, '')
    WHERE d1.id = measurement.device_id
);
DELETE FROM device WHERE id NOT IN (
    SELECT min(id) FROM device GROUP BY profile, name, ifnull(uuid, '')
);
CREATE UNIQUE INDEX device_identity ON device (profile, name, ifnull(uuid, ''));

-- Runs: which host, when they finished, and whether they did. A run is written `incomplete` when it starts and
-- turned `complete` when it ends; one that was killed stays `incomplete` and the planner ignores it. Runs of
-- version 1 (none were ever written by a release) count as complete.
ALTER TABLE run ADD COLUMN host_id INTEGER REFERENCES host (id);
ALTER TABLE run ADD COLUMN finished_at TEXT;
ALTER TABLE run ADD COLUMN status TEXT NOT NULL DEFAULT 'complete'
    CHECK (status IN ('complete', 'incomplete'));

-- Measurements: the shape they were taken at, as columns the planner's lookups can filter on (NULL: not
-- applicable or not recorded; the JSON `context` keeps anything else).
ALTER TABLE measurement ADD COLUMN context_tokens INTEGER CHECK (context_tokens IS NULL OR context_tokens >= 0);
ALTER TABLE measurement ADD COLUMN batch INTEGER CHECK (batch IS NULL OR batch >= 0);
ALTER TABLE measurement ADD COLUMN ubatch INTEGER CHECK (ubatch IS NULL OR ubatch >= 0);
ALTER TABLE measurement ADD COLUMN sequences INTEGER CHECK (sequences IS NULL OR sequences >= 0);
ALTER TABLE measurement ADD COLUMN threads INTEGER CHECK (threads IS NULL OR threads >= 0);
ALTER TABLE measurement ADD COLUMN gpu_layers INTEGER CHECK (gpu_layers IS NULL OR gpu_layers >= 0);
ALTER TABLE measurement ADD COLUMN kv_type TEXT;
ALTER TABLE measurement ADD COLUMN tensor_parallel INTEGER CHECK (tensor_parallel IS NULL OR tensor_parallel >= 1);
ALTER TABLE measurement ADD COLUMN pipeline_parallel INTEGER CHECK (pipeline_parallel IS NULL OR pipeline_parallel >= 1);

CREATE INDEX run_status ON run (status);
CREATE INDEX measurement_shape ON measurement (device_id, model_id, metric, sequences, threads);
