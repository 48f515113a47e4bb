// Command fake-kubelet stands in for the kubelets of a test cluster whose
// nodes run no containers. It registers Nodes (Ready, untainted, with a
// heartbeat Lease), and for every pod bound to one of them does what a
// kubelet reports: Running with an IP, init containers completed, containers
// started and Ready; it finishes the deletion of terminating pods. A pod
// annotated `e2e.ozone-rs.io/ready: "false"` is reported Running but not
// Ready. It also provisions a PersistentVolume for each pending claim, so
// StatefulSets with volume claim templates schedule.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

// NotReady is the pod annotation that keeps a pod from becoming Ready.
const NotReady = "e2e.ozone-rs.io/ready"

type kubelet struct {
	cs         kubernetes.Interface
	readyAfter time.Duration
	nodes      map[string]bool
	mu         sync.Mutex
	ips        map[string]string
	next       int
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig")
	names := flag.String("nodes", "node-1,node-2,node-3", "comma-separated node names")
	labels := flag.String("labels", "", "extra node labels, k=v,k=v")
	readyAfter := flag.Duration("ready-after", 0, "how long a started pod stays unready (a readiness probe's delay)")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	k := &kubelet{cs: cs, readyAfter: *readyAfter, nodes: map[string]bool{}, ips: map[string]string{}}
	extra := map[string]string{}
	for _, kv := range strings.Split(*labels, ",") {
		if p := strings.SplitN(kv, "=", 2); len(p) == 2 {
			extra[p[0]] = p[1]
		}
	}
	for i, n := range strings.Split(*names, ",") {
		k.nodes[n] = true
		if err := k.register(ctx, n, i+1, extra); err != nil {
			log.Fatalf("registering %s: %v", n, err)
		}
	}
	go k.heartbeat(ctx)

	f := informers.NewSharedInformerFactory(cs, 0)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
	pods := f.Core().V1().Pods()
	pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
	})
	claims := f.Core().V1().PersistentVolumeClaims()
	claims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.provision(ctx, o.(*corev1.PersistentVolumeClaim)) },
		UpdateFunc: func(_, o any) { k.provision(ctx, o.(*corev1.PersistentVolumeClaim)) },
	})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	log.Printf("fake kubelet serving nodes %s", *names)
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		pod, err := pods.Lister().Pods(ns).Get(name)
		var later time.Duration
		if err == nil {
			later, err = k.sync(ctx, pod)
		} else if apierrors.IsNotFound(err) {
			err = nil
		}
		if err == nil && later > 0 {
			q.AddAfter(key, later)
		}
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.Printf("pod %s: %v", key, err)
			q.AddRateLimited(key)
		} else if apierrors.IsConflict(err) {
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

func (k *kubelet) register(ctx context.Context, name string, i int, extra map[string]string) error {
	labels := map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i),
	}
	for k, v := range extra {
		labels[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	n, err := k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		n, err = k.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	// Admission taints new nodes not-ready until a node controller sees them
	// Ready; this node is Ready at once.
	var keep []corev1.Taint
	for _, t := range n.Spec.Taints {
		if !strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			keep = append(keep, t)
		}
	}
	n.Spec.Taints = keep
	if n, err = k.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		return err
	}
	n.Status = nodeStatus(capacity, i)
	_, err = k.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

func nodeStatus(capacity corev1.ResourceList, i int) corev1.NodeStatus {
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity, Phase: corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.89.0.%d", i)},
		},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2-fake", OperatingSystem: "linux", Architecture: "amd64"},
	}
}

// heartbeat renews each node's Lease, as kubelets do.
func (k *kubelet) heartbeat(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		for n := range k.nodes {
			leases := k.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
			now := metav1.NewMicroTime(time.Now())
			secs := int32(40)
			l, err := leases.Get(ctx, n, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, err = leases.Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: n},
					Spec:       coordinationv1.LeaseSpec{HolderIdentity: &n, LeaseDurationSeconds: &secs, RenewTime: &now},
				}, metav1.CreateOptions{})
			} else if err == nil {
				l.Spec.RenewTime = &now
				_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			}
			if err != nil && ctx.Err() == nil {
				log.Printf("lease %s: %v", n, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *kubelet) podIP(uid string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ip, ok := k.ips[uid]; ok {
		return ip
	}
	k.next++
	ip := fmt.Sprintf("10.244.%d.%d", k.next/250, k.next%250+2)
	k.ips[uid] = ip
	return ip
}

// sync reports one pod's status the way a kubelet would; returns when to
// look again (a pod still within its readiness delay).
func (k *kubelet) sync(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	if !k.nodes[pod.Spec.NodeName] {
		return 0, nil
	}
	if pod.DeletionTimestamp != nil {
		// Containers "stopped": finish the graceful deletion.
		zero := int64(0)
		return 0, k.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name,
			metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	}
	now := metav1.Now()
	start := now
	if pod.Status.StartTime != nil {
		start = *pod.Status.StartTime
	}
	var later time.Duration
	if wait := k.readyAfter - now.Sub(start.Time); wait > 0 {
		later = wait
	}
	if restartPolicy := pod.Spec.RestartPolicy; restartPolicy == corev1.RestartPolicyNever ||
		restartPolicy == corev1.RestartPolicyOnFailure {
		// A run-to-completion pod (a Job's, `helm test`'s): its containers
		// run nothing here, so it completes at once.
		return 0, k.complete(ctx, pod, start)
	}
	want := desiredStatus(pod, k.podIP(string(pod.UID)), start, later == 0)
	if statusEqual(&pod.Status, &want) {
		return later, nil
	}
	p := pod.DeepCopy()
	p.Status = want
	_, err := k.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return later, err
}

func (k *kubelet) complete(ctx context.Context, pod *corev1.Pod, start metav1.Time) error {
	if pod.Status.Phase == corev1.PodSucceeded {
		return nil
	}
	p := pod.DeepCopy()
	p.Status = corev1.PodStatus{
		Phase: corev1.PodSucceeded, HostIP: "127.0.0.1", StartTime: &start, QOSClass: pod.Status.QOSClass,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: start},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: start},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: start},
		},
	}
	for _, c := range pod.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: start, FinishedAt: metav1.Now()}},
		})
	}
	_, err := k.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

func desiredStatus(pod *corev1.Pod, ip string, start metav1.Time, warm bool) corev1.PodStatus {
	ready := pod.Annotations[NotReady] != "false" && warm
	old := pod.Status
	now := metav1.Now()
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
	}
	cond := func(t corev1.PodConditionType, s corev1.ConditionStatus) corev1.PodCondition {
		for _, c := range old.Conditions {
			if c.Type == t && c.Status == s {
				return c
			}
		}
		return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
	}
	st := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     ip,
		PodIPs:    []corev1.PodIP{{IP: ip}},
		StartTime: &start,
		QOSClass:  old.QOSClass,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, corev1.ConditionTrue),
			cond(corev1.PodInitialized, corev1.ConditionTrue),
			cond(corev1.PodReady, readyStatus),
			cond(corev1.ContainersReady, readyStatus),
			cond(corev1.PodScheduled, corev1.ConditionTrue),
		},
	}
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: start, FinishedAt: start}},
		})
	}
	started := true
	for _, c := range pod.Spec.Containers {
		restarts := int32(0)
		for _, o := range old.ContainerStatuses {
			if o.Name == c.Name {
				restarts = o.RestartCount
			}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: ready, Started: &started,
			RestartCount: restarts, ContainerID: "fake://" + string(pod.UID) + "/" + c.Name,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}},
		})
	}
	return st
}

func statusEqual(a, b *corev1.PodStatus) bool {
	if a.Phase != b.Phase || a.PodIP != b.PodIP || len(a.Conditions) != len(b.Conditions) ||
		len(a.ContainerStatuses) != len(b.ContainerStatuses) ||
		len(a.InitContainerStatuses) != len(b.InitContainerStatuses) {
		return false
	}
	for i := range a.Conditions {
		if a.Conditions[i].Type != b.Conditions[i].Type || a.Conditions[i].Status != b.Conditions[i].Status {
			return false
		}
	}
	for i := range a.ContainerStatuses {
		if a.ContainerStatuses[i].Ready != b.ContainerStatuses[i].Ready ||
			a.ContainerStatuses[i].Image != b.ContainerStatuses[i].Image {
			return false
		}
	}
	return true
}

// provision makes a PersistentVolume pre-bound to a pending claim (static
// binding; the persistent-volume controller completes it).
func (k *kubelet) provision(ctx context.Context, c *corev1.PersistentVolumeClaim) {
	if c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" || c.DeletionTimestamp != nil {
		return
	}
	size := c.Spec.Resources.Requests[corev1.ResourceStorage]
	class := ""
	if c.Spec.StorageClassName != nil {
		class = *c.Spec.StorageClassName
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + string(c.UID)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   c.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: c.Namespace,
				Name: c.Name, UID: c.UID, APIVersion: "v1"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/fake-pv/" + string(c.UID)},
			},
		},
	}
	if _, err := k.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		log.Printf("provisioning %s/%s: %v", c.Namespace, c.Name, err)
	}
}
