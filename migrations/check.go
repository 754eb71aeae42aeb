package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SchemaError says the database's schema is not the one this build needs,
// and what to do about it.
type SchemaError struct {
	Have, Want int // Have is 0 when the database has no tilectl schema
}

func (e *SchemaError) Error() string {
	switch {
	case e.Have == 0:
		return fmt.Sprintf("the database has no tilectl schema: run 'tilectl migrate up' (this tilectl needs version %d)", e.Want)
	case e.Have < e.Want:
		return fmt.Sprintf("the database schema is at version %d, this tilectl needs %d: run 'tilectl migrate up'", e.Have, e.Want)
	default:
		return fmt.Sprintf("the database schema is at version %d, newer than this tilectl knows (%d): use a newer tilectl", e.Have, e.Want)
	}
}

// Querier is what CheckSchema needs of a connection or pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckSchema returns nil when the database is at exactly this build's
// latest version and clean; a *SchemaError or *DirtyError otherwise. Every
// command but migrate runs it before touching tables, so a missing,
// outdated or half-migrated schema gives a clear error, not a SQL one.
func CheckSchema(ctx context.Context, db Querier) error {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, Table).Scan(&exists); err != nil {
		return fmt.Errorf("check schema version: %w", err)
	}
	want := Latest()
	if !exists {
		return &SchemaError{Want: want}
	}
	var version int64
	var dirty bool
	err := db.QueryRow(ctx, `SELECT version, dirty FROM `+pgx.Identifier{Table}.Sanitize()+` LIMIT 1`).Scan(&version, &dirty)
	if err == pgx.ErrNoRows {
		return &SchemaError{Want: want}
	}
	if err != nil {
		return fmt.Errorf("check schema version: %w", err)
	}
	if dirty {
		return &DirtyError{Version: uint(version)}
	}
	if int(version) != want {
		return &SchemaError{Have: int(version), Want: want}
	}
	return nil
}
