package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyRepo copies what the docs check reads (the manifests, the page, the
// image script, go.mod) into a temporary repository of the same layout.
func copyRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	deploy := copyTree(t)
	if err := os.Rename(deploy, filepath.Join(root, "deploy")); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"docs/deployment.md", "infra/image/build.sh", "deploy/check/go.mod"} {
		data, err := os.ReadFile(filepath.Join("../..", file))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestTheCommittedPageMatchesTheOverlay(t *testing.T) {
	if problems := checkDocs("../../docs/deployment.md"); len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
}

// Each break is one the page or the overlay could drift into; the check
// must name it.
func TestEachDocsBreakIsFound(t *testing.T) {
	const page, overlay, edge = "docs/deployment.md", "deploy/k8s/overlays/local/kustomization.yaml", "deploy/k8s/base/edge.yaml"
	breaks := []struct {
		name, file, old, new, want string
	}{
		{"the console on the buyers' port", page, "port-forward svc/seckill-edge-console 9080 &", "port-forward svc/seckill-edge 9080:80 &", `goes to the edge's "http" port, not its "admin"`},
		{"a port nothing forwards", page, "curl -s -X POST 127.0.0.1:8080/", "curl -s -X POST 127.0.0.1:8081/", "forwarded by no command"},
		{"a Service port that is not there", page, "svc/seckill-edge 8080:80", "svc/seckill-edge 8080:8080", "has no port 8080"},
		{"a renamed Service", edge, "  name: seckill-edge-console\n", "  name: seckill-console\n", "no svc seckill-edge-console"},
		{"another namespace", overlay, "namespace: seckill\n", "namespace: shop\n", "the overlay's is shop"},
		{"a Secret's key", overlay, "- admin-token=", "- admin_token=", "has no key admin-token"},
		{"a label no pod has", page, "-l app.kubernetes.io/component=edge", "-l app=edge", "selects no pod"},
		{"a binary no container runs", page, "-- /usr/local/bin/seckillctl reconcile", "-- seckillctl reconcile", "seckillctl is in no container"},
		{"another image loaded", page, "podman save -o /tmp/seckill.tar localhost/seckill:latest", "podman save -o /tmp/seckill.tar seckill:latest", "image seckill:latest, while the overlay runs localhost/seckill:latest"},
		{"another image run", overlay, "newName: localhost/seckill", "newName: registry.example/seckill", "while the overlay runs registry.example/seckill:latest"},
		{"another operator", page, "cnpg-1.30.0.yaml", "cnpg-1.24.0.yaml", "the operator 1.24.0"},
		{"a second node needed", overlay, "        value: preferred\n", "        value: required\n", "3 instances each on its own node"},
		{"no Redis in the overlay", overlay, "  - servers.yaml\n", "", `its server "redis" is no Service`},
		{"a broker elsewhere", overlay, "SECKILL_KAFKA_BROKERS=kafka:9092", "SECKILL_KAFKA_BROKERS=kafka-0.kafka:9092", `its server "kafka-0.kafka" is no Service`},
		{"the operator after the overlay", page, "kubectl apply --server-side -f https://raw.githubusercontent.com/cloudnative-pg/cloudnative-pg/release-1.30/releases/cnpg-1.30.0.yaml\n", "", "the page never shows the CloudNativePG operator installed"},
		{"no console", page, "kubectl -n seckill port-forward svc/seckill-edge-console 9080 &\n", "", "the page never shows the console forwarded"},
		{"no warm-up", page, "curl -s -X PUT 127.0.0.1:9080/admin/sales/1/1", "curl -s -X GET 127.0.0.1:9080/admin/sales/1/1", "the page never shows a sale warmed through the console"},
		{"the image never loaded", page, "kind load image-archive /tmp/seckill.tar --name seckill", "kind create cluster --name other", "the page never shows the image loaded"},
		{"an unknown command", page, "kubectl -n seckill logs", "kubectl -n seckill describe", "does not know (describe)"},
	}
	for _, b := range breaks {
		t.Run(b.name, func(t *testing.T) {
			root := copyRepo(t)
			edit(t, filepath.Join(root, b.file), b.old, b.new)
			problems := strings.Join(checkDocs(filepath.Join(root, page)), "\n")
			if !strings.Contains(problems, b.want) {
				t.Fatalf("want a problem containing %q, got:\n%s", b.want, problems)
			}
		})
	}
}
