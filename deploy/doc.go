// Package deploy holds the Kubernetes deployment of Switchyard (the Helm chart in
// helm/switchyard) and its offline test.
package deploy
