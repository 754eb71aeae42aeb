package upload

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// databaseLost reports whether err says the database stopped answering:
// a connection that failed or was ended by the server (SQLSTATE class 08,
// 57P01-57P03 shutdown), or a database that no longer exists (3D000). A
// run that lost its database cannot count what is left either.
func databaseLost(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") || pgErr.Code == "3D000") {
		return true
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// explainDatabaseLost says, once, what a lost database means for the
// flight and what to do about it.
func (r *run) explainDatabaseLost(err error) error {
	return fmt.Errorf("the database stopped answering during the run: %w\n"+
		"  nothing answered is lost: batches left open settle under their keys on the next run; "+
		"check the database (database_url comes from %s; 'tilectl status' shows whether it answers), "+
		"then run upload-pending again once the database answers", err, r.cfg.Source("database_url"))
}
