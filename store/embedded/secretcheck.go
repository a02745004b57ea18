package embedded

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idemgate/idemgate/store"
)

// secretCheckKey holds the check value of the deployment secret the
// records are made under: 8 bytes of creation time (ms since the epoch,
// little-endian) and the value (see store.SecretCheck). It covers a
// configured secret too, which DIR/secret and its digest do not.
var secretCheckKey = []byte{kindMeta, 's', 'e', 'c', 'r', 'e', 't', 'c', 'h', 'e', 'c', 'k'}

// KeepSecretCheck keeps check when DIR keeps no check value yet, and
// returns the one it keeps.
func (e *Engine) KeepSecretCheck(_ context.Context, check []byte) (store.SecretCheck, error) {
	e.secretMu.Lock()
	defer e.secretMu.Unlock()
	if err := e.enter(); err != nil {
		return store.SecretCheck{}, err
	}
	defer e.leave()
	v, closer, err := e.db.Get(secretCheckKey)
	switch {
	case err == nil:
		defer closer.Close()
		if len(v) < 8 {
			return store.SecretCheck{}, fmt.Errorf("store: embedded store: the secret's check value in %s is damaged (%d bytes)", e.dir, len(v))
		}
		return store.SecretCheck{
			Value:  slices.Clone(v[8:]),
			MadeAt: time.UnixMilli(int64(binary.LittleEndian.Uint64(v))),
		}, nil
	case !errors.Is(err, pebble.ErrNotFound):
		return store.SecretCheck{}, e.readErr(err)
	}
	made := time.Now()
	v = binary.LittleEndian.AppendUint64(nil, uint64(made.UnixMilli()))
	v = append(v, check...)
	end := e.wal.begin(true)
	if err := end(e.db.Set(secretCheckKey, v, pebble.Sync)); err != nil {
		return store.SecretCheck{}, fmt.Errorf("store: embedded store: keep the secret's check value: %w", e.writeErr(err))
	}
	return store.SecretCheck{Value: slices.Clone(check), MadeAt: time.UnixMilli(made.UnixMilli())}, nil
}

// Where names the store in messages: its directory.
func (e *Engine) Where() string { return "embedded store DIR " + e.dir }
