-- Measurement store, version 1. Append-only: a later change is a new file, never an edit of this one.
-- Devices and models are identified by what the tool already computes: a hardware profile id (or a derived
-- id) and the model fingerprint of `optimizer inspect`.
CREATE TABLE device (
    id           INTEGER PRIMARY KEY,
    profile      TEXT NOT NULL,          -- hardware profile id, or derived-... for an unprofiled device
    name         TEXT NOT NULL,          -- as the driver reports it
    uuid         TEXT,                   -- GPU UUID when known
    UNIQUE (profile, name, uuid)
);

CREATE TABLE model (
    id           INTEGER PRIMARY KEY,
    fingerprint  TEXT NOT NULL UNIQUE,
    architecture TEXT NOT NULL,
    tensor_bytes INTEGER NOT NULL CHECK (tensor_bytes >= 0)
);

-- One benchmark or calibration run.
CREATE TABLE run (
    id           INTEGER PRIMARY KEY,
    tool         TEXT NOT NULL,          -- calibrate, llama-bench import, ...
    runtime      TEXT NOT NULL,          -- llama.cpp, vllm, ...
    runtime_version TEXT,
    started_at   TEXT NOT NULL,          -- RFC 3339, UTC
    settings     TEXT NOT NULL DEFAULT '{}'  -- JSON of the runtime flags used
);

-- One measured quantity of a run on a device, optionally for a model.
CREATE TABLE measurement (
    id           INTEGER PRIMARY KEY,
    run_id       INTEGER NOT NULL REFERENCES run (id) ON DELETE CASCADE,
    device_id    INTEGER NOT NULL REFERENCES device (id),
    model_id     INTEGER REFERENCES model (id),
    metric       TEXT NOT NULL,          -- decode_tokens_per_s, prefill_tokens_per_s, bandwidth_bytes_per_s,
                                         -- peak_memory_bytes, decode_efficiency, prefill_efficiency, ...
    value        REAL NOT NULL,
    unit         TEXT NOT NULL,
    context      TEXT NOT NULL DEFAULT '{}'  -- JSON: batch, context length, concurrency the value was taken at
);

CREATE INDEX measurement_lookup ON measurement (device_id, model_id, metric);
