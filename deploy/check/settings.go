package main

// The project's service binaries started with --check-config (load and
// check the settings exactly as at start, connecting to nothing) with the
// environment each container of a rendering or of the Compose file would
// have: a setting the files give that the binary refuses fails here, not
// at the first deployment.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
	corev1 "k8s.io/api/core/v1"
)

// One container to check: where it is, its binary, its environment.
type started struct {
	where  string
	binary string
	env    map[string]string
}

// serviceBinary: the project's service binary a command starts, or "" (the
// CLI, seckillctl, has no settings of its own to check).
func serviceBinary(command []string) string {
	if len(command) == 0 {
		return ""
	}
	name := filepath.Base(command[0])
	if strings.HasPrefix(name, "seckill-") {
		return name
	}
	return ""
}

// kubernetesStarts: every container of the rendering that runs a service
// binary, with the environment the kubelet would give it (ConfigMaps,
// Secrets, $(VAR) references expanded in order).
func (w *world) kubernetesStarts(dir string) []started {
	var starts []started
	for _, d := range w.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if binary := serviceBinary(c.Command); binary != "" {
				starts = append(starts, started{fmt.Sprintf("%s Deployment %s", dir, d.Name), binary, w.containerEnv(&c)})
			}
		}
	}
	return starts
}

func (w *world) containerEnv(c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef != nil {
			for key, value := range w.configMaps[from.ConfigMapRef.Name].Data {
				env[key] = value
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envReference.ReplaceAllStringFunc(e.Value, func(ref string) string {
				if value, ok := env[envReference.FindStringSubmatch(ref)[1]]; ok {
					return value
				}
				return ref
			})
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if secret, ok := w.secrets[ref.Name]; ok {
				if value, ok := secret.Data[ref.Key]; ok {
					env[e.Name] = string(value)
				} else if value, ok := secret.StringData[ref.Key]; ok {
					env[e.Name] = value
				}
			}
		}
	}
	return env
}

// composeStarts: every service of the Compose project that runs a service
// binary, with its environment as Compose resolves it.
func composeStarts(file string, project *types.Project) []started {
	var starts []started
	for name, service := range project.Services {
		binary := serviceBinary(service.Entrypoint)
		if binary == "" {
			continue
		}
		env := map[string]string{}
		for key, value := range service.Environment {
			if value != nil {
				env[key] = *value
			}
		}
		starts = append(starts, started{fmt.Sprintf("%s service %s", file, name), binary, env})
	}
	return starts
}

// checkStarts runs each binary from bin with --check-config and exactly
// its environment (and nothing of this shell's).
func checkStarts(bin string, starts []started) []string {
	sort.Slice(starts, func(i, j int) bool { return starts[i].where < starts[j].where })
	var problems []string
	for _, s := range starts {
		command := exec.Command(filepath.Join(bin, s.binary), "--check-config")
		command.Env = []string{}
		for key, value := range s.env {
			command.Env = append(command.Env, key+"="+value)
		}
		out, err := command.CombinedOutput()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s --check-config: %v: %s", s.where, s.binary, err, strings.TrimSpace(string(out))))
		} else {
			fmt.Printf("ok   %s: %s", s.where, out)
		}
	}
	return problems
}
