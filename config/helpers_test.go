package config

import "reflect"

func equalResolved(a, b []Resolved) bool { return reflect.DeepEqual(a, b) }
