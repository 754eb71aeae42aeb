ALTER TABLE tiles RESET (fillfactor);
