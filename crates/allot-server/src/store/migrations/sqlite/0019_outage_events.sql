-- Allot store schema, version 19: a cluster outage's node events have
-- their own kinds (FLEET-3 `outage`, FLEET-4 `return`), which recovery
-- replays through the engine; before, they were `fail` and `repair`
-- events told apart by their principal's text.
UPDATE node_events SET kind = 'outage'
    WHERE kind = 'fail' AND principal LIKE '%: FLEET-3: cluster % is out of service%';
UPDATE node_events SET kind = 'return'
    WHERE kind = 'repair' AND principal LIKE '%: FLEET-4: cluster %';
