import EventSourceClient
import Foundation
import MetricsTestKit
import NIOCore
import RealtimeCore
import RealtimeTesting
import Testing

/// Every metric Docs/Metrics.md promises for an event stream moves: attempts, the open connection,
/// events and bytes received, a failure by its code and the reconnect after a cut.
@Suite(.timeLimit(.minutes(1))) struct EventSourceMetricsTests {
    @Test func aStreamThatDropsAndResumes() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feeds = FeedList()
        server.route("/events") { _ in
            let feed = ChunkFeed()
            feeds.append(feed)
            feed.send("id: 1\ndata: hello\n\n")
            return .init(headers: sseHeaders, body: .feed(feed))
        }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let metrics = TestMetrics()
        let probe = MetricsProbe(metrics, protocol: "sse", client: "prices")
        let source = EventSource(
            url: URL(string: proxy.url() + "/events")!, configuration: fastConfiguration { $0.clientLabel = "prices" },
            runtime: RealtimeRuntime(metricsFactory: metrics))
        var iterator = source.events.makeAsyncIterator()
        #expect(try await iterator.next()?.data == "hello")
        #expect(probe.meter(ClientMetrics.connectionsOpenLabel) == 1)
        proxy.cutAll(.reset)
        #expect(try await iterator.next()?.data == "hello", "the reconnect's first event")
        #expect(probe.counter(ClientMetrics.connectionAttemptsLabel) == 2)
        #expect(probe.counter(ClientMetrics.reconnectsLabel) == 1)
        #expect(probe.counter(ClientMetrics.connectionFailuresLabel, [("code", "connectionClosed")]) == 1)
        #expect(probe.counter(ClientMetrics.messagesReceivedLabel) == 2)
        #expect(probe.counter(ClientMetrics.bytesReceivedLabel) == 2 * Int64("id: 1\ndata: hello\n\n".utf8.count))
        #expect(probe.meter(ClientMetrics.connectionsOpenLabel) == 1)
        source.close()
        #expect(probe.meter(ClientMetrics.connectionsOpenLabel) == 0)
        feeds.finishAll()
    }
}
