package main

// The checks of one kubectl command (or a request through one) against
// the overlay a page applies, as rendered.

import (
	"fmt"
	"strings"

	cnpgv1 "github.com/cloudnative-pg/api/pkg/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// objectsNamed: every kind/name the words name is in the rendering.
func (p *page) objectsNamed(words []string) []string {
	var problems []string
	for _, word := range words {
		kind, name, ok := strings.Cut(word, "/")
		if !ok || strings.Contains(name, "/") || strings.HasPrefix(word, "--") {
			continue
		}
		if p.find(kind, name) == nil {
			problems = append(problems, fmt.Sprintf("no %s %s in the overlay", kind, name))
		}
	}
	return problems
}

func (p *page) find(kind, name string) runtime.Object {
	for _, object := range p.objects {
		if named, err := meta.Accessor(object); err == nil && named.GetName() == name && shortKind(object) == kind {
			return object
		}
	}
	return nil
}

func shortKind(object runtime.Object) string {
	switch object.(type) {
	case *corev1.Service:
		return "svc"
	case *cnpgv1.Cluster:
		return "cluster"
	}
	kind := strings.ToLower(fmt.Sprintf("%T", object))
	kind = kind[strings.LastIndex(kind, ".")+1:]
	if kind == "deployment" {
		return "deploy"
	}
	return kind
}

// forward: `port-forward svc/NAME [LOCAL:]REMOTE`: REMOTE is a port of the
// Service; a request to LOCAL reaches its target port.
func (p *page) forward(words []string) []string {
	var service *corev1.Service
	for _, word := range words {
		if name, ok := strings.CutPrefix(word, "svc/"); ok {
			service, _ = p.find("svc", name).(*corev1.Service)
		}
	}
	if service == nil {
		return []string{"port-forward to no Service"}
	}
	ports := words[len(words)-1]
	local, remote, split := strings.Cut(ports, ":")
	if !split {
		remote = local
	}
	for _, port := range service.Spec.Ports {
		if fmt.Sprint(port.Port) == remote {
			p.forwards[local] = port.TargetPort.String()
			return nil
		}
	}
	return []string{fmt.Sprintf("Service %s has no port %s", service.Name, remote)}
}

// request: a curl to a forwarded port reaches the edge's address that
// answers its path (the console for /admin/, the buyers' for the rest).
func (p *page) request(command string) []string {
	m := localURL.FindStringSubmatch(command)
	if m == nil {
		return nil
	}
	target, forwarded := p.forwards[m[1]]
	if !forwarded {
		return []string{"port " + m[1] + " is forwarded by no command before it"}
	}
	want := "http"
	if strings.HasPrefix(m[2], "/admin/") {
		want = "admin"
	}
	if target != want {
		return []string{fmt.Sprintf("%s goes to the edge's %q port, not its %q", m[2], target, want)}
	}
	return nil
}

func (p *page) secretKey(words []string) []string {
	joined := strings.Join(words, " ")
	for i, word := range words {
		if word != "secret" || i+1 >= len(words) {
			continue
		}
		secret, ok := p.w.secrets[words[i+1]]
		if !ok {
			return []string{"no Secret " + words[i+1]}
		}
		if _, key, ok := strings.Cut(joined, "{.data."); ok {
			key = strings.SplitN(key, "}", 2)[0]
			if secret.Data[key] == nil && secret.StringData[key] == "" {
				return []string{fmt.Sprintf("Secret %s has no key %s", secret.Name, key)}
			}
		}
		return nil
	}
	return []string{"a kubectl get this check does not know"}
}

// selector: `-l` selects some Deployment's pods.
func (p *page) selector(words []string) []string {
	for i, word := range words {
		if word == "-l" && i+1 < len(words) {
			selector, err := labels.Parse(words[i+1])
			if err != nil {
				return []string{err.Error()}
			}
			for _, d := range p.w.deployments {
				if selector.Matches(labels.Set(d.Spec.Template.Labels)) {
					return nil
				}
			}
			return []string{"-l " + words[i+1] + " selects no pod"}
		}
	}
	return nil
}

// execs: the binary run in a pod is one a container of the overlay runs.
func (p *page) execs(words []string) []string {
	for i, word := range words {
		if word != "--" || i+1 >= len(words) {
			continue
		}
		for _, object := range p.objects {
			for _, c := range containers(object) {
				if len(c.Command) > 0 && c.Command[0] == words[i+1] && c.Image == p.image {
					return nil
				}
			}
		}
		return []string{words[i+1] + " is in no container of the image " + p.image}
	}
	return []string{"exec runs nothing (`-- BINARY`)"}
}

// imageNamed: the image a page saves or loads is the one the services run.
func (p *page) imageNamed(words []string) []string {
	for _, word := range words {
		if strings.Contains(word, "seckill:") && word != p.image {
			return []string{fmt.Sprintf("image %s, while the overlay runs %s", word, p.image)}
		}
	}
	return nil
}

func containers(object runtime.Object) []corev1.Container {
	switch o := object.(type) {
	case *appsv1.Deployment:
		return o.Spec.Template.Spec.Containers
	case *batchv1.Job:
		return o.Spec.Template.Spec.Containers
	}
	return nil
}

func (w *world) namespace() string {
	for _, d := range w.deployments {
		return d.Namespace
	}
	return ""
}
