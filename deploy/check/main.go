// Command check renders the Kubernetes manifests under deploy/k8s and
// validates them offline, and validates the Compose file:
//
//	go run . render ../k8s/overlays/local   # the manifests, as YAML
//	go run . check ../k8s/overlays/* -compose ../compose.yaml [-bin DIR] [-docs PAGE]
//
// Rendering is kustomize's own library. Every object is decoded strictly
// into the Kubernetes API types (k8s.io/api), the database's Cluster into
// CloudNativePG's (github.com/cloudnative-pg/api): an unknown or repeated
// field, a wrong type or an unknown kind is an error. Then the rules this
// deployment promises are checked (policy.go). With -bin, the project's
// service binaries in DIR check the settings each container would start
// with (settings.go). With -docs, the Kubernetes commands the page shows
// are checked against the overlay it applies (docs.go). No cluster, no
// network.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	cnpgv1 "github.com/cloudnative-pg/api/pkg/api/v1"
	"github.com/compose-spec/compose-go/v2/cli"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: check render DIR | check check DIR... [-compose FILE]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "render":
		yaml, err := render(os.Args[2])
		if err != nil {
			fail(err)
		}
		os.Stdout.Write(yaml)
	case "check":
		dirs, flags := splitArgs(os.Args[2:])
		compose, bin := flags["-compose"], flags["-bin"]
		problems := 0
		var starts []started
		for _, dir := range dirs {
			found, dirStarts := checkKustomization(dir)
			problems += report(dir, found)
			starts = append(starts, dirStarts...)
		}
		if compose != "" {
			found, composeStarts := checkCompose(compose)
			problems += report(compose, found)
			starts = append(starts, composeStarts...)
		}
		if page := flags["-docs"]; page != "" {
			problems += report(page, checkDocs(page))
		}
		if bin != "" {
			if len(starts) == 0 {
				problems += report("settings", []string{"no container runs a service binary"})
			}
			problems += report("settings", checkStarts(bin, starts))
		}
		if problems > 0 {
			fmt.Fprintf(os.Stderr, "deploy-check: %d problem(s)\n", problems)
			os.Exit(1)
		}
	default:
		fail(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}

// splitArgs: the overlays' directories, and the value of each -flag.
func splitArgs(args []string) (dirs []string, flags map[string]string) {
	flags = map[string]string{}
	for i := 0; i < len(args); i++ {
		if strings.HasPrefix(args[i], "-") && i+1 < len(args) {
			flags[args[i]] = args[i+1]
			i++
			continue
		}
		dirs = append(dirs, args[i])
	}
	return dirs, flags
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "deploy-check:", err)
	os.Exit(2)
}

func report(what string, problems []string) int {
	if len(problems) == 0 {
		fmt.Printf("ok   %s\n", what)
		return 0
	}
	for _, problem := range problems {
		fmt.Printf("FAIL %s: %s\n", what, problem)
	}
	return len(problems)
}

// kinds: Kubernetes' own, and CloudNativePG's (the database's Cluster),
// each decoded into its Go type.
func kinds() *runtime.Scheme {
	kinds := runtime.NewScheme()
	if err := scheme.AddToScheme(kinds); err != nil {
		fail(err)
	}
	if err := cnpgv1.AddToScheme(kinds); err != nil {
		fail(err)
	}
	return kinds
}

func kustomize(dir string) (*krusty.Kustomizer, filesys.FileSystem) {
	return krusty.MakeKustomizer(krusty.MakeDefaultOptions()), filesys.MakeFsOnDisk()
}

func render(dir string) ([]byte, error) {
	k, fs := kustomize(dir)
	resources, err := k.Run(fs, dir)
	if err != nil {
		return nil, err
	}
	return resources.AsYaml()
}

// checkKustomization renders dir and decodes every object strictly, then
// applies the deployment's rules to the typed objects; it answers the
// containers that run service binaries too.
func checkKustomization(dir string) ([]string, []started) {
	objects, problems := load(dir)
	if objects == nil {
		return problems, nil
	}
	w, _ := index(objects)
	return append(problems, policy(objects)...), w.kubernetesStarts(dir)
}

// load renders dir and decodes every object strictly (nil objects: it
// did not render).
func load(dir string) ([]runtime.Object, []string) {
	k, fs := kustomize(dir)
	resources, err := k.Run(fs, dir)
	if err != nil {
		return nil, []string{"rendering: " + err.Error()}
	}
	decoder := serializer.NewCodecFactory(kinds(), serializer.EnableStrict).UniversalDeserializer()
	var problems []string
	objects := []runtime.Object{}
	for _, resource := range resources.Resources() {
		yaml, err := resource.AsYAML()
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		object, _, err := decoder.Decode(yaml, nil, nil)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s %s: %v", resource.GetKind(), resource.GetName(), err))
			continue
		}
		objects = append(objects, object)
	}
	return objects, problems
}

// checkCompose loads the Compose file as `docker compose config` would
// (the Compose specification's schema, interpolation, anchors, merges),
// with only the variable the README tells a user to set; it answers the
// services that run service binaries too.
func checkCompose(file string) ([]string, []started) {
	options, err := cli.NewProjectOptions([]string{file},
		cli.WithName("seckill"),
		cli.WithProfiles([]string{"tools"}),
		cli.WithEnv([]string{"SECKILL_ADMIN_TOKEN=" + composeAdminToken}),
	)
	if err != nil {
		return []string{err.Error()}, nil
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		return []string{err.Error()}, nil
	}
	return composePolicy(project), composeStarts(file, project)
}

// The admin token the Compose file is loaded with, as `openssl rand -hex
// 16` would make one (the README's instruction).
const composeAdminToken = "0123456789abcdef0123456789abcdef"

// lower-case, for the secret-looking name rule.
func looksSecret(name string) bool {
	name = strings.ToLower(name)
	for _, word := range []string{"token", "secret", "password", "passwd"} {
		if strings.Contains(name, word) {
			return true
		}
	}
	return false
}
