package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyTree copies deploy/ (the manifests and the Compose file) into a
// temporary folder, so a test can break one thing in it.
func copyTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, top := range []string{"k8s", "compose.yaml"} {
		err := filepath.Walk(filepath.Join("..", top), func(path string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel("..", path)
			if info.IsDir() {
				return os.MkdirAll(filepath.Join(dst, rel), 0o755)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func edit(t *testing.T, file, old, new string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s does not contain %q", file, old)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTheCommittedDeploymentPasses(t *testing.T) {
	problems, starts := checkKustomization("../k8s/overlays/local")
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	if len(starts) != 3 {
		t.Fatalf("want the edge, order service and compensator to check, got %v", starts)
	}
	problems, starts = checkCompose("../compose.yaml")
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	if len(starts) != 5 {
		t.Fatalf("want two edges, two order services and the compensator to check, got %v", starts)
	}
	for _, s := range starts {
		if value, set := s.env["SECKILL_USER_JWT_SECRET"]; set {
			t.Fatalf("%s: SECKILL_USER_JWT_SECRET set (to %q) though the user did not set it", s.where, value)
		}
	}
}

// Each break is one a reviewer could miss; the check must name it.
func TestEachBreakIsFound(t *testing.T) {
	breaks := []struct {
		name, file, old, new, want string
	}{
		{"unknown field", "k8s/base/edge.yaml", "  replicas: 2\n", "  replicas: 2\n  replica: 2\n", `unknown field "spec.replica"`},
		{"repeated field", "k8s/base/edge.yaml", "  replicas: 2\n", "  replicas: 2\n  replicas: 3\n", `replicas`},
		{"wrong type", "k8s/base/edge.yaml", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: soon", "terminationGracePeriodSeconds"},
		{"password in the ConfigMap", "k8s/base/settings.env", "DATABASE_USER=seckill", "DATABASE_USER=seckill\nDATABASE_PASSWORD_PLAIN=x", "looks like a secret"},
		{"credentials in a URL", "k8s/base/settings.env", "SECKILL_REDIS_URL=redis://redis:6379/0", "SECKILL_REDIS_URL=redis://u:p@redis:6379/0", "credentials in a URL"},
		{"secret as a literal", "k8s/base/edge.yaml", "            - name: SECKILL_HTTP_ADDR\n", "            - name: SECKILL_ADMIN_TOKEN_X\n              value: hunter2\n            - name: SECKILL_HTTP_ADDR\n", "not taken from a Secret"},
		{"missing secret key", "k8s/base/pod-defaults.yaml", "key: password", "key: db-password", "not there"},
		{"one database instance", "k8s/base/postgres.yaml", "instances: 3", "instances: 1", "1 instances"},
		{"no synchronous replica", "k8s/base/postgres.yaml", "  minSyncReplicas: 1\n", "  minSyncReplicas: 0\n", "no synchronous replica"},
		{"services on a replica", "k8s/base/settings.env", "DATABASE_HOST=seckill-db-rw", "DATABASE_HOST=seckill-db-ro", "not seckill-db-rw"},
		{"unknown database field", "k8s/base/postgres.yaml", "  instances: 3\n", "  instances: 3\n  instance: 3\n", `unknown field "spec.instance"`},
		{"readiness on /healthz", "k8s/base/edge.yaml", "path: /readyz", "path: /healthz", "readiness probe on /healthz"},
		{"writable root", "k8s/base/pod-defaults.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "not read-only"},
		{"grace too short", "k8s/base/order.yaml", "terminationGracePeriodSeconds: 45", "terminationGracePeriodSeconds: 20", "not longer than preStop + drain"},
		{"longer drain set", "k8s/base/settings.env", "RUST_LOG=info", "RUST_LOG=info\nSECKILL__SHUTDOWN_TIMEOUT_MS=60000", "not longer than preStop + drain"},
		{"no memory limit", "k8s/base/compensator.yaml", "memory: 256Mi", "", "no memory limit"},
		{"variable used before defined", "k8s/base/pod-defaults.yaml", "@$(DATABASE_HOST)", "@$(DATABASE_HOSTNAME)", "before it is defined"},
		{"console beside the buyers", "k8s/base/edge.yaml", "      port: 80\n      targetPort: http\n", "      port: 80\n      targetPort: http\n    - name: admin\n      port: 9080\n      targetPort: admin\n", "serves the buyers' port and the operators' console together"},
		{"console outside the cluster", "k8s/base/edge.yaml", "  type: ClusterIP\n", "  type: NodePort\n", "published outside the cluster"},
		{"no budget", "k8s/base/order.yaml", "  name: seckill-order\nspec:\n  maxUnavailable", "  name: seckill-order\nspec:\n  selector: {matchLabels: {x: y}}\n  maxUnavailable", "no PodDisruptionBudget"},
	}
	for _, b := range breaks {
		t.Run(b.name, func(t *testing.T) {
			root := copyTree(t)
			edit(t, filepath.Join(root, b.file), b.old, b.new)
			found, _ := checkKustomization(filepath.Join(root, "k8s/overlays/local"))
			problems := strings.Join(found, "\n")
			if !strings.Contains(problems, b.want) {
				t.Fatalf("want a problem containing %q, got:\n%s", b.want, problems)
			}
		})
	}
}

func TestComposeBreaksAreFound(t *testing.T) {
	breaks := []struct {
		name, old, new, want string
	}{
		{"token in the file", "SECKILL_ADMIN_TOKEN: ${SECKILL_ADMIN_TOKEN:?set SECKILL_ADMIN_TOKEN}\n    # No value", "SECKILL_ADMIN_TOKEN: hunter2\n    # No value", "written in the file"},
		{"not in the schema", "  read_only: true\n  user: \"65532:65532\"\n  depends_on:", "  read_only: true\n  readonly: true\n  user: \"65532:65532\"\n  depends_on:", "readonly"},
		{"console on every interface", "127.0.0.1:9081:9080", "9081:9080", "port 9080 published beyond this host's loopback"},
		{"writable", "  read_only: true\n  user: \"65532:65532\"\n  depends_on:", "  read_only: false\n  user: \"65532:65532\"\n  depends_on:", "not read-only"},
	}
	for _, b := range breaks {
		t.Run(b.name, func(t *testing.T) {
			root := copyTree(t)
			edit(t, filepath.Join(root, "compose.yaml"), b.old, b.new)
			found, _ := checkCompose(filepath.Join(root, "compose.yaml"))
			problems := strings.Join(found, "\n")
			if !strings.Contains(problems, b.want) {
				t.Fatalf("want a problem containing %q, got:\n%s", b.want, problems)
			}
		})
	}
}
