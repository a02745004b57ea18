package keying

import (
	"reflect"
	"testing"
)

func TestTemplateHeaders(t *testing.T) {
	for _, tt := range []struct {
		src  string
		want []string
	}{
		{"{header.Authorization}", []string{"Authorization"}},
		{"{header.x-api-key}:{query.tenant}:{header.X-Api-Key}:{header.X-Tenant}", []string{"X-Api-Key", "X-Tenant"}},
		{"{body.id}:{form.a}", nil},
	} {
		if got := MustParseTemplate(tt.src).Headers(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Headers() = %q, want %q", tt.src, got, tt.want)
		}
	}
}
