-- idem_versioned_update (after the same read in _ver.sql).
SELECT idem_versioned_update('users', jsonb_build_object('id', :u::int), :ev,
                             jsonb_build_object('points', :np::bigint));
