package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The services, as the images name them (switchyard/<service>).
var services = []string{"frontend", "scheduler", "flash-indexer", "session-prefix-indexer", "kvhint-emitter", "engine-shim", "kv-pool"}

var flagsDir string

// serviceFlags builds the services' binaries from this checkout, the ones the images
// hold (services/<service>/cmd/<service>, scripts/build.sh), and asks each for its flags
// (`<service> -h`). So a SWITCHYARD_* variable the chart sets is checked against the
// flags as they are now, wherever a flag is registered.
func serviceFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	dir, err := os.MkdirTemp("", "switchyard-deploy-test-")
	if err != nil {
		t.Fatal(err)
	}
	flagsDir = dir
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, svc := range services {
		args = append(args, "./services/"+svc+"/cmd/"+svc)
	}
	build := exec.Command("go", args...)
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	all := map[string]map[string]bool{}
	for _, svc := range services {
		var stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(dir, svc), "-h")
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		cmd.Env = cleanEnv()
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s -h: %v\n%s", svc, err, stderr.String())
		}
		all[svc] = parseFlags(stderr.Bytes())
		if !all[svc]["grpc-addr"] {
			t.Fatalf("%s -h lists no --grpc-addr; output:\n%s", svc, stderr.String())
		}
	}
	return all
}

// cleanEnv is the environment without SWITCHYARD_* variables, which the flag set would
// otherwise read.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SWITCHYARD_") {
			env = append(env, kv)
		}
	}
	return env
}

var flagLine = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9.-]*)`)

// parseFlags reads flag.PrintDefaults' output: "  -name type" lines.
func parseFlags(usage []byte) map[string]bool {
	flags := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(usage))
	for sc.Scan() {
		if m := flagLine.FindStringSubmatch(sc.Text()); m != nil {
			flags[m[1]] = true
		}
	}
	return flags
}

// envName is servicekit.EnvName: the variable a flag reads.
func envName(flag string) string {
	return "SWITCHYARD_" + strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(flag))
}

func cleanupFlags() {
	if flagsDir != "" {
		os.RemoveAll(flagsDir)
	}
}
