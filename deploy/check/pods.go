package main

// The rules of a pod: the pipeline's (non-root on a read-only root, no
// privilege, sized, names that exist, probes, a grace longer than its
// drain) and a development overlay's servers' (fewer: their images write
// where they run).

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// pod: non-root, read-only root, no privilege, sized, and every name its
// environment uses exists.
func (w *world) pod(where string, spec *corev1.PodSpec) []string {
	problems := nonRoot(where, spec)
	for _, c := range spec.Containers {
		at := fmt.Sprintf("%s container %s", where, c.Name)
		if c.Image == "" || c.Image == "seckill" {
			problems = append(problems, at+": no image named (an overlay's images: sets it)")
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			problems = append(problems, at+": root filesystem not read-only")
		}
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			problems = append(problems, at+": privilege escalation allowed")
		}
		problems = append(problems, sized(at, &c)...)
		problems = append(problems, w.environment(at, &c)...)
	}
	return problems
}

// environment: secrets come from Secrets that exist, ConfigMaps exist, and
// every $(VAR) is defined before it is used.
func (w *world) environment(at string, c *corev1.Container) []string {
	var problems []string
	defined := map[string]bool{}
	for _, from := range c.EnvFrom {
		if ref := from.ConfigMapRef; ref != nil {
			configMap, ok := w.configMaps[ref.Name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: ConfigMap %s does not exist", at, ref.Name))
				continue
			}
			for key := range configMap.Data {
				defined[key] = true
			}
		}
	}
	for _, env := range c.Env {
		if looksSecret(env.Name) && (env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil) {
			problems = append(problems, fmt.Sprintf("%s: %s is not taken from a Secret", at, env.Name))
		}
		if env.ValueFrom != nil && env.ValueFrom.SecretKeyRef != nil {
			ref := env.ValueFrom.SecretKeyRef
			optional := ref.Optional != nil && *ref.Optional
			secret, ok := w.secrets[ref.Name]
			if !optional && (!ok || (secret.Data[ref.Key] == nil && secret.StringData[ref.Key] == "")) {
				problems = append(problems, fmt.Sprintf("%s: %s wants key %s of Secret %s, which is not there", at, env.Name, ref.Key, ref.Name))
			}
		}
		for _, match := range envReference.FindAllStringSubmatch(env.Value, -1) {
			if !defined[match[1]] {
				problems = append(problems, fmt.Sprintf("%s: %s uses $(%s) before it is defined", at, env.Name, match[1]))
			}
		}
		defined[env.Name] = true
	}
	return problems
}

func nonRoot(where string, spec *corev1.PodSpec) []string {
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		return []string{where + ": runAsNonRoot is not set"}
	}
	return nil
}

// sized: requests and limits of CPU and memory.
func sized(at string, c *corev1.Container) []string {
	var problems []string
	for _, kind := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[kind]; !ok {
			problems = append(problems, fmt.Sprintf("%s: no %s request", at, kind))
		}
		if _, ok := c.Resources.Limits[kind]; !ok {
			problems = append(problems, fmt.Sprintf("%s: no %s limit", at, kind))
		}
	}
	return problems
}

// isServer: a server a development overlay runs beside the pipeline
// (Redis, Kafka: component "server"), not one of the pipeline's services.
func isServer(d *appsv1.Deployment) bool {
	return d.Spec.Template.Labels["app.kubernetes.io/component"] == "server"
}

// server: a development overlay's Redis or Kafka runs as no root user,
// unprivileged, sized, its readiness probed (their images write where they
// run, so no read-only root; no drain budget, no disruption budget: one
// pod whose data is lost with it).
func server(where string, spec *corev1.PodSpec) []string {
	problems := nonRoot(where, spec)
	for _, c := range spec.Containers {
		at := fmt.Sprintf("%s container %s", where, c.Name)
		if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			problems = append(problems, at+": privilege escalation allowed")
		}
		problems = append(problems, sized(at, &c)...)
		if c.ReadinessProbe == nil {
			problems = append(problems, at+": no readiness probe")
		}
	}
	return problems
}

// probes: alive is /healthz (no dependency), ready is /readyz, and a
// startup probe guards the first start.
func probes(where string, spec *corev1.PodSpec) []string {
	var problems []string
	for _, c := range spec.Containers {
		want := []struct {
			what  string
			probe *corev1.Probe
			path  string
		}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, ""}}
		for _, w := range want {
			switch {
			case w.probe == nil || w.probe.HTTPGet == nil:
				problems = append(problems, fmt.Sprintf("%s: no HTTP %s probe", where, w.what))
			case w.path != "" && w.probe.HTTPGet.Path != w.path:
				problems = append(problems, fmt.Sprintf("%s: %s probe on %s, not %s", where, w.what, w.probe.HTTPGet.Path, w.path))
			case w.probe.HTTPGet.Port.StrVal != "" && !hasPort(spec.Containers, w.probe.HTTPGet.Port.StrVal):
				problems = append(problems, fmt.Sprintf("%s: %s probe on port %q, which no container has", where, w.what, w.probe.HTTPGet.Port.StrVal))
			}
		}
	}
	return problems
}

// grace: the pod gets more time than its preStop and its drain take.
func (w *world) grace(where, component string, spec *corev1.PodSpec) []string {
	budget, known := drainBudget[component]
	if !known {
		return []string{fmt.Sprintf("%s: component %q has no drain budget here", where, component)}
	}
	var needed time.Duration
	for _, c := range spec.Containers {
		settings := w.settingsOf(&c)
		for _, part := range budget {
			ms := part.ms
			if value, ok := settings[part.setting]; ok {
				parsed, err := strconv.ParseInt(value, 10, 64)
				if err != nil {
					return []string{fmt.Sprintf("%s: %s=%q is not a number", where, part.setting, value)}
				}
				ms = parsed
			}
			needed += time.Duration(ms) * time.Millisecond
		}
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			needed += time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	grace := 30 * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if grace <= needed {
		return []string{fmt.Sprintf("%s: terminationGracePeriodSeconds %v is not longer than preStop + drain %v", where, grace, needed)}
	}
	return nil
}
