import MetricsTestKit
import RealtimeCore
import RealtimeTesting
import Testing

/// Metric handles belong to a series, not to a connection: clients share them.
@Suite struct ClientMetricsTests {
    @Test("Clients of one protocol and label on one factory share one instance; another label or factory gets its own")
    func clientsShareTheirHandles() {
        let metrics = TestMetrics()
        let runtime = RealtimeRuntime(clock: ManualClock(), metricsFactory: metrics)
        let first = ClientMetrics.shared(protocol: "sse", client: "a", runtime: runtime)
        let second = ClientMetrics.shared(protocol: "sse", client: "a", runtime: runtime)
        #expect(first === second)
        #expect(first !== ClientMetrics.shared(protocol: "sse", client: "b", runtime: runtime))
        #expect(first !== ClientMetrics.shared(protocol: "signalr", client: "a", runtime: runtime))
        let other = RealtimeRuntime(clock: ManualClock(), metricsFactory: TestMetrics())
        #expect(first !== ClientMetrics.shared(protocol: "sse", client: "a", runtime: other))
        // Two clients' counts add up in the one series they report to.
        first.received(messages: 2, bytes: 10)
        second.received(messages: 3, bytes: 5)
        let probe = MetricsProbe(metrics, protocol: "sse", client: "a")
        #expect(probe.counter(ClientMetrics.messagesReceivedLabel) == 5)
        #expect(probe.counter(ClientMetrics.bytesReceivedLabel) == 15)
    }

    @Test("An instance no client holds any more is not kept")
    func releasedInstancesAreNotKept() {
        let runtime = RealtimeRuntime(clock: ManualClock(), metricsFactory: TestMetrics())
        weak var released: ClientMetrics?
        do {
            let held = ClientMetrics.shared(protocol: "sse", client: "gone", runtime: runtime)
            released = held
            #expect(released != nil)
        }
        #expect(released == nil)
    }
}
