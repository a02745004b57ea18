package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSServerName is the DNS name in the certificate of a StartTLS server
// (besides the IP address 127.0.0.1).
const TLSServerName = "redis.test"

// File names StartTLS writes into the server's directory.
const (
	tlsCAFile   = "ca.pem"
	tlsCertFile = "server.pem"
	tlsKeyFile  = "server-key.pem"
)

// StartTLS runs redis-server like Start, but serving TLS only: a fresh CA
// signs a server certificate for 127.0.0.1 and TLSServerName, the plain
// port is off (--port 0) and Port is the TLS port. Clients need no
// certificate of their own. CAFile gives the CA's PEM file, TLSConfig a
// client configuration that trusts it, and Client connects over TLS.
func StartTLS(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		Start(t) // skips or fails with the usual message
		return nil
	}
	s := &Server{Dir: t.TempDir(), bin: bin, extra: append([]string(nil), extraArgs...)}
	pool, err := writeCerts(s.Dir)
	if err != nil {
		t.Fatalf("redistest: TLS certificates: %v", err)
	}
	s.tls = &tls.Config{RootCAs: pool, ServerName: TLSServerName, MinVersion: tls.VersionTLS12}
	s.launch(t)
	return s
}

// CAFile is the PEM file of the CA that signed a StartTLS server's
// certificate ("" for a plain server).
func (s *Server) CAFile() string {
	if s.tls == nil {
		return ""
	}
	return filepath.Join(s.Dir, tlsCAFile)
}

// TLSConfig is a client configuration that trusts a StartTLS server (nil
// for a plain server).
func (s *Server) TLSConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Clone()
}

func tlsArgs(dir string) []string {
	return []string{
		"--tls-cert-file", filepath.Join(dir, tlsCertFile),
		"--tls-key-file", filepath.Join(dir, tlsKeyFile),
		"--tls-ca-cert-file", filepath.Join(dir, tlsCAFile),
		"--tls-auth-clients", "no",
	}
}

// writeCerts makes a CA and a server certificate it signs, writes them to
// dir and returns a pool holding the CA.
func writeCerts(dir string) (*x509.CertPool, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: TLSServerName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{TLSServerName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	for name, block := range map[string]*pem.Block{
		tlsCAFile:   {Type: "CERTIFICATE", Bytes: caDER},
		tlsCertFile: {Type: "CERTIFICATE", Bytes: der},
		tlsKeyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, nil
}
