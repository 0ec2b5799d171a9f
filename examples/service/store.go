package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/node"
	"modernc.org/sqlite" // pure-Go SQLite driver: no cgo
	sqlite3 "modernc.org/sqlite/lib"
)

// Store is the service's database: a SQLite file every process opens (a
// stand-in for the Postgres or MySQL a real fleet shares). Every write of
// a shard's owner is fenced by its token: the store keeps the highest
// epoch it has accepted per shard and refuses a write carrying a lower
// one, so a deposed owner that wakes up late cannot overwrite its
// successor (docs/recipes.md, "Fencing a SQL write").
type Store struct{ db *sql.DB }

// ErrStaleToken: the store has accepted a newer epoch for the shard.
var ErrStaleToken = errors.New("store: stale fencing token")

const schema = `
CREATE TABLE IF NOT EXISTS fence (
	shard  INTEGER PRIMARY KEY,
	epoch  INTEGER NOT NULL,
	writer TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS writes (
	id     INTEGER PRIMARY KEY AUTOINCREMENT,
	shard  INTEGER NOT NULL,
	epoch  INTEGER NOT NULL,
	writer TEXT    NOT NULL,
	what   TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS orders (
	key           TEXT PRIMARY KEY,
	shard         INTEGER NOT NULL,
	accepted_by   TEXT    NOT NULL,
	accepted_epoch INTEGER NOT NULL,
	shipped_by    TEXT,
	shipped_epoch INTEGER,
	ships         INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS refused (
	shard  INTEGER NOT NULL,
	epoch  INTEGER NOT NULL,
	writer TEXT    NOT NULL
);`

// OpenStore opens (and creates) the SQLite database at path. WAL and a
// busy timeout let several processes write; transactions take the write
// lock up front (_txlock=immediate) so the fence check and the write are
// one atomic step across processes.
//
// Several processes may open a new database at the same moment: the
// switch to WAL needs the file's exclusive lock and SQLite answers
// SQLITE_BUSY at once (the busy timeout does not cover a journal-mode
// change), so opening retries a busy database until openTimeout.
func OpenStore(path string) (*Store, error) {
	deadline := time.Now().Add(openTimeout)
	for {
		st, err := openStore(path)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(openRetry)
	}
}

const (
	openTimeout = 30 * time.Second
	openRetry   = 50 * time.Millisecond
)

func openStore(path string) (*Store, error) {
	dsn := "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)&_pragma=synchronous(normal)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: opening %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Fenced runs write inside one transaction that first advances the
// shard's fence to tok's epoch — a conditional UPDATE that accepts only an
// epoch >= the stored one — and logs the write. It returns ErrStaleToken,
// and changes nothing, when the store has seen a newer epoch.
func (s *Store) Fenced(ctx context.Context, tok node.Token, writer, what string, write func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO fence(shard, epoch, writer) VALUES (?, 0, '')`, tok.Shard); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `UPDATE fence SET epoch = ?, writer = ? WHERE shard = ? AND epoch <= ?`,
		tok.Epoch, writer, tok.Shard, tok.Epoch)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		_ = tx.Rollback()
		_, _ = s.db.ExecContext(ctx, `INSERT INTO refused(shard, epoch, writer) VALUES (?, ?, ?)`, tok.Shard, tok.Epoch, writer)
		return fmt.Errorf("%w: shard %d epoch %d from %s", ErrStaleToken, tok.Shard, tok.Epoch, writer)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO writes(shard, epoch, writer, what) VALUES (?, ?, ?, ?)`,
		tok.Shard, tok.Epoch, writer, what); err != nil {
		return err
	}
	if write != nil {
		if err := write(tx); err != nil {
			return err
		}
	}
	return tx.Commit()
}
