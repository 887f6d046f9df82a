SELECT idem_try_insert(:scope, :k);
