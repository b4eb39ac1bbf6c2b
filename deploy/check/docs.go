package main

// The Kubernetes commands a page of the docs shows (its ```sh blocks),
// checked against the overlay it applies, as rendered: the namespace, each
// object and label it names, the Secret's key it reads, the ports it
// forwards and which of the edge's addresses a request through them
// reaches, the binary it runs in a pod, the image it loads, the
// CloudNativePG operator's version, and that a one-node cluster can
// schedule it. No cluster runs here; a command this check does not know
// is a problem, so a new one is checked or the check grows.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// The operator's manifest a page installs.
var cnpgRelease = regexp.MustCompile(`cnpg-(\d+\.\d+\.\d+)\.yaml`)

// A request to a forwarded port.
var localURL = regexp.MustCompile(`127\.0\.0\.1:(\d+)(/\S*)`)

// The page's commands: ```sh blocks, continuations joined, comments cut.
func shLines(text string) []string {
	var lines []string
	inside, current := false, ""
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inside = !inside && strings.TrimSpace(line) == "```sh"
			continue
		}
		if !inside {
			continue
		}
		if at := strings.Index(line, "  #"); at >= 0 {
			line = line[:at]
		}
		line = strings.TrimSpace(line)
		if strings.HasSuffix(line, `\`) {
			current += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		if whole := strings.Join(strings.Fields(current+line), " "); whole != "" {
			lines = append(lines, whole)
		}
		current = ""
	}
	return lines
}

// A page's commands and the world they act on.
type page struct {
	root     string // the repository
	w        *world
	objects  []runtime.Object
	forwards map[string]string // local port -> the target port's name
	image    string            // the image every service runs
}

// checkDocs checks the page's commands against the overlay its
// `kubectl apply -k` names (paths from the repository's root, the page's
// parent directory's parent).
func checkDocs(file string) []string {
	text, err := os.ReadFile(file)
	if err != nil {
		return []string{err.Error()}
	}
	lines := shLines(string(text))
	p := &page{root: filepath.Dir(filepath.Dir(file)), forwards: map[string]string{}}
	var problems []string
	for _, line := range lines {
		if dir, ok := strings.CutPrefix(line, "kubectl apply -k "); ok {
			objects, found := load(filepath.Join(p.root, dir))
			if objects == nil {
				return found
			}
			p.objects = objects
			p.w, _ = index(objects)
			problems = append(problems, found...)
		}
	}
	if p.w == nil {
		return []string{"the page applies no overlay (kubectl apply -k)"}
	}
	p.image = p.serviceImage()
	problems = append(problems, p.oneNode()...)
	problems = append(problems, p.serversReached()...)
	for _, line := range lines {
		for _, problem := range p.line(line) {
			problems = append(problems, fmt.Sprintf("`%s`: %s", line, problem))
		}
	}
	return append(problems, p.journey(lines)...)
}

// journey: the page takes a newcomer from nothing to a sale, in order —
// the operator the overlay needs and the image loaded into the node
// before the overlay is applied, then the console reached and a sale
// warmed, bought and reconciled after it.
func (p *page) journey(lines []string) []string {
	at := func(found func(string) bool) int {
		for i, line := range lines {
			if found(line) {
				return i
			}
		}
		return -1
	}
	applied := at(func(l string) bool { return strings.HasPrefix(l, "kubectl apply -k ") })
	steps := []struct {
		what   string
		before bool
		found  func(string) bool
	}{
		{"the CloudNativePG operator installed", true, func(l string) bool { return cnpgRelease.MatchString(l) }},
		{"the image loaded into the node", true, func(l string) bool {
			return strings.Contains(l, "image-archive") || strings.Contains(l, "image import") || strings.Contains(l, "image load")
		}},
		{"the console forwarded", false, func(l string) bool {
			return strings.Contains(l, "port-forward") && p.request("curl 127.0.0.1:"+lastPort(l)+"/admin/") == nil
		}},
		{"a sale warmed through the console", false, func(l string) bool {
			return strings.Contains(l, "-X PUT") && strings.Contains(l, "/admin/sales/")
		}},
		{"an order placed", false, func(l string) bool { return strings.Contains(l, "/api/seckill/order") }},
		{"the sale reconciled", false, func(l string) bool { return strings.Contains(l, "seckillctl reconcile") }},
	}
	var problems []string
	for _, step := range steps {
		i := at(step.found)
		switch {
		case i < 0:
			problems = append(problems, "the page never shows "+step.what)
		case step.before && i > applied:
			problems = append(problems, step.what+" only after the overlay is applied")
		case !step.before && i < applied:
			problems = append(problems, step.what+" before the overlay is applied")
		}
	}
	return problems
}

// lastPort: the local port a `port-forward … [LOCAL:]REMOTE [&]` line forwards.
func lastPort(line string) string {
	words := strings.Fields(strings.TrimSuffix(line, " &"))
	local, _, _ := strings.Cut(words[len(words)-1], ":")
	return local
}

func (p *page) line(line string) []string {
	command := strings.TrimSuffix(line, " &")
	if _, inner, ok := strings.Cut(line, "=$("); ok && !strings.Contains(strings.Fields(line)[0], " ") {
		command = strings.TrimSuffix(inner, ")")
	}
	words := strings.Fields(command)
	switch {
	case words[0] == "kubectl":
		return p.kubectl(words)
	case words[0] == "curl":
		return p.request(command)
	case words[0] == "podman" || words[0] == "docker" && len(words) > 1 && words[1] == "save":
		return p.imageNamed(words)
	case line == "make image":
		script, _ := os.ReadFile(filepath.Join(p.root, "infra/image/build.sh"))
		if !strings.Contains(string(script), "tag=${1:-"+p.image+"}") {
			return []string{"infra/image/build.sh does not make " + p.image}
		}
	}
	return nil
}

func (p *page) kubectl(words []string) []string {
	var problems []string
	namespace := ""
	for i, word := range words {
		if word == "-n" && i+1 < len(words) {
			namespace = words[i+1]
		}
	}
	if namespace != "" && namespace != p.w.namespace() {
		if namespace != "cnpg-system" {
			problems = append(problems, fmt.Sprintf("namespace %s: the overlay's is %s", namespace, p.w.namespace()))
		}
		return problems
	}
	verb := words[1]
	if namespace != "" {
		verb = words[3]
	}
	switch verb {
	case "apply":
		if m := cnpgRelease.FindStringSubmatch(strings.Join(words, " ")); m != nil && m[1] != cnpgAPIVersion(p.root) {
			problems = append(problems, fmt.Sprintf("the operator %s, while the Cluster is checked against its API %s", m[1], cnpgAPIVersion(p.root)))
		}
	case "wait", "rollout", "exec", "port-forward":
		problems = append(problems, p.objectsNamed(words)...)
	case "get":
		problems = append(problems, p.secretKey(words)...)
	case "logs":
		problems = append(problems, p.selector(words)...)
	default:
		problems = append(problems, "a kubectl command this check does not know ("+verb+")")
	}
	if verb == "port-forward" {
		problems = append(problems, p.forward(words)...)
	}
	if verb == "exec" {
		problems = append(problems, p.execs(words)...)
	}
	return problems
}

// oneNode: nothing the overlay holds needs a second node.
func (p *page) oneNode() []string {
	var problems []string
	for _, db := range p.w.databases {
		if db.Spec.Instances > 1 && db.Spec.Affinity.PodAntiAffinityType != "preferred" {
			problems = append(problems, fmt.Sprintf("Cluster %s: %d instances each on its own node", db.Name, db.Spec.Instances))
		}
	}
	for _, d := range p.w.deployments {
		if a := d.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil &&
			len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 && *d.Spec.Replicas > 1 {
			problems = append(problems, fmt.Sprintf("Deployment %s: replicas each on its own node", d.Name))
		}
	}
	return problems
}

// serversReached: the servers every service is configured with (Redis,
// each Kafka broker, the database) are Services of the overlay, or the
// database Cluster's read-write Service its operator makes: "from nothing"
// means nothing outside the overlay.
func (p *page) serversReached() []string {
	services := map[string]bool{}
	for _, s := range p.w.services {
		services[s.Name] = true
	}
	for _, db := range p.w.databases {
		services[db.Name+"-rw"] = true
	}
	var problems []string
	for _, d := range p.w.deployments {
		if isServer(d) {
			continue
		}
		settings := p.w.settingsOf(&d.Spec.Template.Spec.Containers[0])
		hosts := []string{settings["DATABASE_HOST"], hostOf(strings.TrimPrefix(settings["SECKILL_REDIS_URL"], "redis://"))}
		for _, broker := range strings.Split(settings["SECKILL_KAFKA_BROKERS"], ",") {
			hosts = append(hosts, hostOf(broker))
		}
		for _, host := range hosts {
			if !services[host] {
				problems = append(problems, fmt.Sprintf("Deployment %s: its server %q is no Service of the overlay", d.Name, host))
			}
		}
	}
	return problems
}

// hostOf: the host of `host:port/...`.
func hostOf(address string) string {
	host, _, _ := strings.Cut(address, ":")
	return host
}

func (p *page) serviceImage() string {
	for _, d := range p.w.deployments {
		if !isServer(d) {
			return d.Spec.Template.Spec.Containers[0].Image
		}
	}
	return ""
}

// cnpgAPIVersion: the CloudNativePG API module go.mod pins (without v).
func cnpgAPIVersion(root string) string {
	mod, _ := os.ReadFile(filepath.Join(root, "deploy/check/go.mod"))
	for _, line := range strings.Split(string(mod), "\n") {
		if fields := strings.Fields(line); len(fields) == 2 && fields[0] == "github.com/cloudnative-pg/api" {
			return strings.TrimPrefix(fields[1], "v")
		}
	}
	return ""
}
