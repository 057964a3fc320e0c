import Benchmark
import Foundation
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import SpreadbotClient

/// A connected client per setting, against its own in-process SpreadbotTestServer, made on first
/// use. Malloc counts include the server (same process).
actor Fixtures {
    static let shared = Fixtures()

    final class Fixture: Sendable {
        let server: SpreadbotTestServer
        let client: Spreadbot
        let arrivals: AsyncStream<Void>
        init(server: SpreadbotTestServer, client: Spreadbot, arrivals: AsyncStream<Void>) {
            self.server = server
            self.client = client
            self.arrivals = arrivals
        }
    }

    private var fixtures: [String: Fixture] = [:]

    func fixture(_ transport: SpreadbotTransport, acknowledged: Bool = false) async throws -> Fixture {
        let key = "\(transport)-\(acknowledged)"
        if let existing = fixtures[key] { return existing }
        let server = try await SpreadbotTestServer.start()
        server.setResource("/account", json: #"{"plan":"bench","messages":1000}"#)
        var configuration = SpreadbotConfiguration(baseURL: server.baseURL, accessToken: server.options.accessToken)
        configuration.transports = [transport]
        configuration.acknowledgedSends = acknowledged
        configuration.reachability = AlwaysReachable()
        let client = Spreadbot(configuration: configuration)
        let (arrivals, arrived) = AsyncStream<Void>.makeStream()
        client.onMessage { _, _, _ in arrived.yield() }
        let connected = Task { for await state in client.stateUpdates() where state == .connected { return } }
        client.establishConnection(path: "bench")
        await connected.value
        let fixture = Fixture(server: server, client: client, arrivals: arrivals)
        fixtures[key] = fixture
        return fixture
    }
}

let payload = String(repeating: "p", count: 100)

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal], warmupIterations: 3,
        maxDuration: .seconds(5), maxIterations: 200)

    // MARK: Stream in: the server publishes 1,000 messages of 100 bytes; the iteration ends when
    // the client's onMessage saw all of them.
    for transport in [SpreadbotTransport.webSocket, .serverSentEvents] {
        Benchmark("stream in: 1,000 messages over \(transport)") { benchmark in
            let fixture = try await Fixtures.shared.fixture(transport)
            var arrivals = fixture.arrivals.makeAsyncIterator()
            for _ in benchmark.scaledIterations {
                for _ in 0..<1_000 { fixture.server.publish(payload, to: "bench") }
                for _ in 0..<1_000 { await arrivals.next() }
            }
        }
    }

    // MARK: Sends: 1,000 messages of 100 bytes, the iteration ends when the last is delivered
    // (written to the WebSocket, or answered 2xx by its POST).
    for (name, transport, acknowledged) in [
        ("WebSocket frames", SpreadbotTransport.webSocket, false),
        ("acknowledged POSTs (acknowledgedSends)", .webSocket, true),
        ("POSTs beside an SSE stream", .serverSentEvents, false),
    ] {
        Benchmark("send: 1,000 messages as \(name)") { benchmark in
            let fixture = try await Fixtures.shared.fixture(transport, acknowledged: acknowledged)
            for _ in benchmark.scaledIterations {
                var last: SpreadbotDelivery?
                for _ in 0..<1_000 { last = try fixture.client.enqueue(.text(payload)) }
                try await last?.delivered()
            }
        }
    }

    // MARK: REST: one GET round trip with the bearer token.
    Benchmark("REST: getData round trip") { benchmark in
        let fixture = try await Fixtures.shared.fixture(.webSocket)
        for _ in benchmark.scaledIterations {
            blackHole(try await fixture.client.rest.getData(path: "account"))
        }
    }
}
