package embedded

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// secretFile holds the deployment secret: secretMagic, the secret, and a
// CRC-32C of both. A 32-byte file without them is an earlier version's
// and is rewritten with the checksum on Open.
const (
	secretFile  = "secret"
	secretMagic = "IDGSEC1\n"
	secretSize  = 32
)

// secretDigestKey holds the SHA-256 of the secret the records were made
// under, so a secret file replaced by another is refused too.
var secretDigestKey = []byte{kindMeta, 's', 'e', 'c', 'r', 'e', 't'}

// encodeSecret is the file's content for secret.
func encodeSecret(secret []byte) []byte {
	b := append([]byte(secretMagic), secret...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// readSecret reads and checks DIR/secret; legacy is true for a file of
// an earlier version (no checksum).
func readSecret(dir string) ([]byte, error) {
	path := filepath.Join(dir, secretFile)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("store: embedded store: %w", err)
	}
	if len(b) == secretSize {
		return b, nil // an earlier version's: rewritten by Open
	}
	n := len(secretMagic) + secretSize
	if len(b) != n+4 || string(b[:len(secretMagic)]) != secretMagic ||
		crc32.Checksum(b[:n], crcTable) != binary.LittleEndian.Uint32(b[n:]) {
		return nil, fmt.Errorf("store: embedded store: %s is damaged (its checksum does not match): "+
			"restore it from a backup; a new secret would make every stored key execute again", path)
	}
	return slices.Clone(b[len(secretMagic):n]), nil
}

// openSecret checks DIR/secret at Open: against the digest kept in the
// database, and rewritten with its checksum when an earlier version
// wrote it. Missing is fine as long as no record exists.
func (e *Engine) openSecret() error {
	path := filepath.Join(e.dir, secretFile)
	secret, err := readSecret(e.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if has, err := e.hasRecords(); err != nil || !has {
			return err
		}
		if _, kept, _ := e.secretDigest(); kept {
			return fmt.Errorf("store: embedded store: %s is missing but DIR holds records made under it: "+
				"restore it from a backup; a new secret would make every stored key execute again", path)
		}
		return nil
	case err != nil:
		return err
	}
	digest, kept, err := e.secretDigest()
	if err != nil {
		return err
	}
	sum := sha256.Sum256(secret)
	if kept && !bytes.Equal(digest, sum[:]) {
		return fmt.Errorf("store: embedded store: %s is not the secret the records in DIR were made under: "+
			"restore it from a backup", path)
	}
	if fi, err := os.Stat(path); err == nil && fi.Size() == secretSize {
		if err := writeFileSync(path, encodeSecret(secret)); err != nil {
			return fmt.Errorf("store: embedded store: add a checksum to %s: %w", path, err)
		}
	}
	if !kept {
		if err := e.db.Set(secretDigestKey, sum[:], pebble.Sync); err != nil {
			return e.writeErr(err)
		}
	}
	e.secret = secret
	return nil
}

// secretDigest is the digest kept in the database, if any.
func (e *Engine) secretDigest() ([]byte, bool, error) {
	v, closer, err := e.db.Get(secretDigestKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, e.readErr(err)
	}
	defer closer.Close()
	return slices.Clone(v), true, nil
}

// hasRecords reports whether any record is stored (a record key that
// holds a tombstone alone is none).
func (e *Engine) hasRecords() (bool, error) {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindRecord}, UpperBound: []byte{kindRecord + 1}})
	if err != nil {
		return false, e.readErr(err)
	}
	has := it.First()
	for has && len(it.Value()) > 0 && it.Value()[0] == opTomb {
		has = it.Next()
	}
	err = it.Error()
	_ = it.Close()
	if err != nil {
		return false, e.readErr(err)
	}
	return has, nil
}

// Secret returns the deployment secret kept in DIR/secret, creating a
// random one (written aside, fsync'd and renamed, its digest kept in the
// database) the first time.
func (e *Engine) Secret(ctx context.Context) ([]byte, error) {
	e.secretMu.Lock()
	defer e.secretMu.Unlock()
	if e.secret != nil {
		return slices.Clone(e.secret), nil
	}
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	b := make([]byte, secretSize)
	_, _ = rand.Read(b)
	sum := sha256.Sum256(b)
	end := e.wal.begin(true)
	if err := end(e.db.Set(secretDigestKey, sum[:], pebble.Sync)); err != nil {
		return nil, fmt.Errorf("store: embedded store: create the secret: %w", e.writeErr(err))
	}
	if err := writeFileSync(filepath.Join(e.dir, secretFile), encodeSecret(b)); err != nil {
		return nil, fmt.Errorf("store: embedded store: create the secret: %w", err)
	}
	e.secret = b
	return slices.Clone(b), nil
}

// KeptSecret returns the deployment secret kept in DIR/secret, or nil
// when DIR keeps none; it never creates one.
func (e *Engine) KeptSecret(context.Context) ([]byte, error) {
	e.secretMu.Lock()
	defer e.secretMu.Unlock()
	return slices.Clone(e.secret), nil
}

// secretSum is the digest of secret kept in the database.
func secretSum(secret []byte) []byte {
	sum := sha256.Sum256(secret)
	return sum[:]
}

// writeFileSync writes path aside, fsyncs it, renames it into place and
// fsyncs DIR.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// syncDir fsyncs a directory, so a rename or a removal in it lasts.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
