package postgres

import (
	"strings"
	"testing"
)

// TestSchemaNames: a schema that is the database's default (public),
// the SQL standard's (information_schema) or Postgres's own (pg_…) is a
// config error; the store's own names are fine.
func TestSchemaNames(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{"", ""},
		{"idemgate", ""},
		{"idemgate_2", ""},
		{"public_api", ""},
		{"public", `schema: "public" is the database's default schema`},
		{"PUBLIC", `schema: "PUBLIC" is the database's default schema`},
		{"information_schema", `schema: "information_schema" is the SQL standard's`},
		{"pg_catalog", `schema: "pg_catalog" starts with pg_`},
		{"pg_idemgate", `schema: "pg_idemgate" starts with pg_`},
		{"Pg_Temp", `schema: "Pg_Temp" starts with pg_`},
	} {
		t.Run(tc.schema, func(t *testing.T) {
			err := (&Module{URL: "postgres://db/app", Schema: tc.schema}).Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v; want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestRedacted: a connection URL in a message shows no password, in its
// user information or in libpq's parameters.
func TestRedacted(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"postgres://app:hunter2@db:5432/app?sslmode=verify-full", "postgres://app:xxxxx@db:5432/app?sslmode=verify-full"},
		{"postgres://app@db/app?password=hunter2&sslmode=require", "postgres://app@db/app?password=xxxxx&sslmode=require"},
		{"postgresql://db/app?sslpassword=hunter2", "postgresql://db/app?sslpassword=xxxxx"},
		{"host=db password=hunter2", "(a connection string)"},
	} {
		if got := Redacted(tc.url); got != tc.want || strings.Contains(got, "hunter2") {
			t.Errorf("Redacted(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}
