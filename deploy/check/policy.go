package main

import (
	"fmt"
	"regexp"

	cnpgv1 "github.com/cloudnative-pg/api/pkg/api/v1"
	"github.com/compose-spec/compose-go/v2/types"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// How long each component may take to stop after SIGTERM, in ms, with the
// services' defaults and the settings that change them (the services'
// --print-config shows both).
var drainBudget = map[string][]struct {
	setting string
	ms      int64
}{
	"edge":        {{"SECKILL__SHUTDOWN_TIMEOUT_MS", 10_000}, {"SECKILL__KAFKA__MESSAGE_TIMEOUT_MS", 5_000}},
	"order":       {{"SECKILL__SHUTDOWN_TIMEOUT_MS", 30_000}},
	"compensator": {{"SECKILL__SHUTDOWN_TIMEOUT_MS", 30_000}},
}

// A user and password inside a URL.
var credentialsInURL = regexp.MustCompile(`://[^/@:\s]+:[^/@\s]+@`)

// A $(VAR) reference in an env value.
var envReference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

type world struct {
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	deployments []*appsv1.Deployment
	jobs        []*batchv1.Job
	services    []*corev1.Service
	budgets     []*policyv1.PodDisruptionBudget
	autoscalers []*autoscalingv2.HorizontalPodAutoscaler
	databases   []*cnpgv1.Cluster
}

func index(objects []runtime.Object) (*world, []string) {
	w := &world{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	var problems []string
	for _, object := range objects {
		switch o := object.(type) {
		case *corev1.ConfigMap:
			w.configMaps[o.Name] = o
		case *corev1.Secret:
			w.secrets[o.Name] = o
		case *appsv1.Deployment:
			w.deployments = append(w.deployments, o)
		case *batchv1.Job:
			w.jobs = append(w.jobs, o)
		case *corev1.Service:
			w.services = append(w.services, o)
		case *policyv1.PodDisruptionBudget:
			w.budgets = append(w.budgets, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			w.autoscalers = append(w.autoscalers, o)
		case *cnpgv1.Cluster:
			w.databases = append(w.databases, o)
		case *corev1.Namespace:
		default:
			problems = append(problems, fmt.Sprintf("%T: a kind this deployment does not use", object))
		}
	}
	return w, problems
}

// policy: what every rendering of deploy/k8s must hold.
func policy(objects []runtime.Object) []string {
	w, problems := index(objects)
	for name, configMap := range w.configMaps {
		for key, value := range configMap.Data {
			if looksSecret(key) {
				problems = append(problems, fmt.Sprintf("ConfigMap %s: %s looks like a secret: put it in a Secret", name, key))
			}
			if credentialsInURL.MatchString(value) {
				problems = append(problems, fmt.Sprintf("ConfigMap %s: %s carries credentials in a URL", name, key))
			}
		}
	}
	for _, d := range w.deployments {
		where := "Deployment " + d.Name
		if isServer(d) {
			problems = append(problems, server(where, &d.Spec.Template.Spec)...)
			continue
		}
		problems = append(problems, w.pod(where, &d.Spec.Template.Spec)...)
		problems = append(problems, probes(where, &d.Spec.Template.Spec)...)
		problems = append(problems, w.grace(where, d.Spec.Template.Labels["app.kubernetes.io/component"], &d.Spec.Template.Spec)...)
		if !w.hasBudget(d) {
			problems = append(problems, where+": no PodDisruptionBudget selects its pods")
		}
	}
	if len(w.deployments) == 0 {
		problems = append(problems, "no Deployment")
	}
	migrations := 0
	for _, job := range w.jobs {
		problems = append(problems, w.pod("Job "+job.Name, &job.Spec.Template.Spec)...)
		if c := job.Spec.Template.Spec.Containers; len(c) > 0 && len(c[0].Command) > 1 && c[0].Command[1] == "migrate" {
			migrations++
		}
	}
	if migrations != 1 {
		problems = append(problems, fmt.Sprintf("%d migration Jobs (want one)", migrations))
	}
	for _, s := range w.services {
		if d := w.selected(s.Spec.Selector); d == nil {
			problems = append(problems, fmt.Sprintf("Service %s: selects no Deployment's pods", s.Name))
		} else {
			for _, port := range s.Spec.Ports {
				if port.TargetPort.StrVal != "" && !hasPort(d.Spec.Template.Spec.Containers, port.TargetPort.StrVal) {
					problems = append(problems, fmt.Sprintf("Service %s: target port %q is no container port", s.Name, port.TargetPort.StrVal))
				}
			}
		}
	}
	problems = append(problems, w.console()...)
	for _, h := range w.autoscalers {
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || w.deployment(h.Spec.ScaleTargetRef.Name) == nil {
			problems = append(problems, fmt.Sprintf("HorizontalPodAutoscaler %s: scales no Deployment here", h.Name))
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			problems = append(problems, fmt.Sprintf("HorizontalPodAutoscaler %s: replicas out of order", h.Name))
		}
	}
	if edge := w.deployment("seckill-edge"); edge != nil && !w.autoscaled(edge.Name) {
		problems = append(problems, "the edge has no HorizontalPodAutoscaler")
	}
	return append(problems, w.database()...)
}

// database: one CloudNativePG Cluster of at least three instances with a
// synchronous replica (a failover loses no acknowledged commit), its
// application role from a basic-auth Secret that exists, and every service
// connecting to its read-write Service (the primary, wherever it moved).
func (w *world) database() []string {
	if len(w.databases) != 1 {
		return []string{fmt.Sprintf("%d CloudNativePG Clusters (want the database's one)", len(w.databases))}
	}
	var problems []string
	db := w.databases[0]
	where := "Cluster " + db.Name
	if db.Spec.Instances < 3 {
		problems = append(problems, fmt.Sprintf("%s: %d instances (want 3: a primary and two replicas)", where, db.Spec.Instances))
	}
	if db.Spec.MinSyncReplicas < 1 {
		problems = append(problems, where+": no synchronous replica (minSyncReplicas: 1): a failover could lose acknowledged commits")
	}
	if init := db.Spec.Bootstrap; init == nil || init.InitDB == nil || init.InitDB.Secret == nil {
		problems = append(problems, where+": the application's role has no Secret (bootstrap.initdb.secret)")
	} else if secret, ok := w.secrets[init.InitDB.Secret.Name]; !ok {
		problems = append(problems, fmt.Sprintf("%s: Secret %s does not exist", where, init.InitDB.Secret.Name))
	} else if secret.Type != corev1.SecretTypeBasicAuth {
		problems = append(problems, fmt.Sprintf("%s: Secret %s is %q, not kubernetes.io/basic-auth", where, secret.Name, secret.Type))
	}
	for _, d := range w.deployments {
		if isServer(d) {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if host := w.settingsOf(&c)["DATABASE_HOST"]; host != db.Name+"-rw" {
				problems = append(problems, fmt.Sprintf("Deployment %s: DATABASE_HOST %q, not %s-rw (the primary)", d.Name, host, db.Name))
			}
		}
	}
	return problems
}

// settingsOf: the plain values a container's environment sets.
func (w *world) settingsOf(c *corev1.Container) map[string]string {
	settings := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef != nil {
			for key, value := range w.configMaps[from.ConfigMapRef.Name].Data {
				settings[key] = value
			}
		}
	}
	for _, env := range c.Env {
		if env.ValueFrom == nil {
			settings[env.Name] = env.Value
		}
	}
	return settings
}

func hasPort(containers []corev1.Container, name string) bool {
	for _, c := range containers {
		for _, port := range c.Ports {
			if port.Name == name {
				return true
			}
		}
	}
	return false
}

func (w *world) deployment(name string) *appsv1.Deployment {
	for _, d := range w.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

func (w *world) selected(selector map[string]string) *appsv1.Deployment {
	if len(selector) == 0 {
		return nil
	}
	for _, d := range w.deployments {
		if labels.SelectorFromSet(selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			return d
		}
	}
	return nil
}

func (w *world) hasBudget(d *appsv1.Deployment) bool {
	for _, b := range w.budgets {
		if b.Spec.Selector != nil && len(b.Spec.Selector.MatchExpressions) == 0 &&
			w.selected(b.Spec.Selector.MatchLabels) == d {
			return true
		}
	}
	return false
}

func (w *world) autoscaled(name string) bool {
	for _, h := range w.autoscalers {
		if h.Spec.ScaleTargetRef.Name == name {
			return true
		}
	}
	return false
}

// composePolicy: the project's own containers run read-only as non-root,
// the long-running ones with a health check, and the admin token is never
// written into the file.
func composePolicy(project *types.Project) []string {
	var problems []string
	ours := 0
	for name, service := range project.Services {
		if len(service.Entrypoint) == 0 || !regexp.MustCompile(`^/usr/local/bin/seckill`).MatchString(service.Entrypoint[0]) {
			continue
		}
		ours++
		if !service.ReadOnly {
			problems = append(problems, name+": root filesystem not read-only")
		}
		if service.User == "" || service.User == "0" || service.User == "root" {
			problems = append(problems, name+": runs as root")
		}
		oneShot := service.Restart == "no" || len(service.Profiles) > 0
		if !oneShot && (service.HealthCheck == nil || len(service.HealthCheck.Test) == 0) {
			problems = append(problems, name+": no health check")
		}
		for _, port := range service.Ports {
			if port.Published != "" && port.HostIP != "127.0.0.1" {
				problems = append(problems, fmt.Sprintf("%s: port %d published beyond this host's loopback", name, port.Target))
			}
		}
		if token, ok := service.Environment["SECKILL_ADMIN_TOKEN"]; ok && (token == nil || *token != composeAdminToken) {
			problems = append(problems, name+": SECKILL_ADMIN_TOKEN is written in the file, not taken from the environment")
		}
	}
	if ours < 7 {
		problems = append(problems, fmt.Sprintf("%d of the project's services (want migrate, two edges, two order services, a compensator, ctl)", ours))
	}
	return problems
}

// console: the edge's operators' port is published by a ClusterIP Service
// of its own, never beside the buyers' port (an ingress routing that
// Service would publish /admin) and never outside the cluster.
func (w *world) console() []string {
	var problems []string
	for _, s := range w.services {
		targets := map[string]bool{}
		for _, port := range s.Spec.Ports {
			targets[port.TargetPort.StrVal] = true
		}
		if !targets["admin"] {
			continue
		}
		if targets["http"] {
			problems = append(problems, fmt.Sprintf("Service %s: serves the buyers' port and the operators' console together", s.Name))
		}
		if s.Spec.Type != "" && s.Spec.Type != corev1.ServiceTypeClusterIP {
			problems = append(problems, fmt.Sprintf("Service %s: the operators' console published outside the cluster (%s)", s.Name, s.Spec.Type))
		}
	}
	if edge := w.deployment("seckill-edge"); edge != nil && !hasPort(edge.Spec.Template.Spec.Containers, "admin") {
		problems = append(problems, "the edge has no admin port: its console would be on loopback, out of reach")
	}
	return problems
}
