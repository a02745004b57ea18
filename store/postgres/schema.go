package postgres

import (
	"fmt"
	"strings"
)

// checkSchema refuses a schema the store must not make its tables in:
// the database's default (public), the SQL standard's catalog
// (information_schema) or one of Postgres's own (pg_…), in any case.
// "" is the default schema, idemgate.
func checkSchema(name string) error {
	const alone = ": name one for the store alone, e.g. " + DefaultSchema
	switch l := strings.ToLower(name); {
	case l == "public":
		return fmt.Errorf("schema: %q is the database's default schema, where the application's own tables live%s", name, alone)
	case l == "information_schema":
		return fmt.Errorf("schema: %q is the SQL standard's catalog%s", name, alone)
	case strings.HasPrefix(l, "pg_"):
		return fmt.Errorf("schema: %q starts with pg_, which Postgres keeps for its own schemas%s", name, alone)
	}
	return nil
}
