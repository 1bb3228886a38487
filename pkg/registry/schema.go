package registry

import memdb "github.com/hashicorp/go-memdb"

const (
	tableWorkers = "workers"
	tableLeases  = "leases"
	indexID      = "id"
)

// tableFactory builds one table's schema; schema() assembles them (the Nomad
// state-store pattern keeps each table's indexes next to its name).
type tableFactory func() *memdb.TableSchema

var tableFactories = []tableFactory{workersTable, leasesTable}

func schema() *memdb.DBSchema {
	s := &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{}}
	for _, f := range tableFactories {
		t := f()
		s.Tables[t.Name] = t
	}
	return s
}

// workersTable holds membership: what a worker is. Rewritten on register and
// deregister only.
func workersTable() *memdb.TableSchema { return byID(tableWorkers) }

// leasesTable holds liveness and load: rewritten by every heartbeat.
func leasesTable() *memdb.TableSchema { return byID(tableLeases) }

// byID builds a table whose rows are found by their unique ID field.
func byID(name string) *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: name,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: &memdb.StringFieldIndex{Field: "ID"}},
		},
	}
}
