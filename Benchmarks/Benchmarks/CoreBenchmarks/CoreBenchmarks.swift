import Benchmark
import EventSourceClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RealtimeCore
import RealtimeTesting
import WSClient

#if canImport(Glibc)
import Glibc
#endif

/// One echo server per benchmark process, started on first use (in-process: its allocations are
/// counted too, equally for both clients, so the difference between them is our layer's cost).
actor EchoServerHolder {
    static let shared = EchoServerHolder()
    private var server: LoopbackServer?

    func url() async throws -> String {
        if let server { return server.webSocketBaseURL }
        let started = try await WebSocketEchoServer.start()
        server = started
        return started.webSocketBaseURL
    }
}

/// The SSE corpus from Scripts/sse_corpus.py, generated on first use into Benchmarks/.corpus.
enum Corpus {
    static let directory: String = {
        let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return here.appendingPathComponent(".corpus").path
    }()

    static func load(_ name: String) -> [UInt8] {
        let path = directory + "/" + name
        if !FileManager.default.fileExists(atPath: path) {
            let script = URL(fileURLWithPath: directory).deletingLastPathComponent().appendingPathComponent("Scripts/sse_corpus.py").path
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", script, "--mib", "50", "--out", directory]
            process.standardOutput = FileHandle.nullDevice
            try? process.run()
            process.waitUntilExit()
        }
        guard let data = FileManager.default.contents(atPath: path) else { fatalError("corpus \(path) missing: run Scripts/sse_corpus.py --mib 50 --out .corpus") }
        return [UInt8](data)
    }

    static let lf = load("corpus-lf.sse")
    static let crlf = load("corpus-crlf.sse")
    static let chunkSize = 64 * 1024
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 1,
        maxDuration: .seconds(5),
        maxIterations: 1_000_000
    )

    // MARK: WebSocket echo round trips over loopback, ours vs WSClient used directly.

    let roundTrip = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal], warmupIterations: 100, scalingFactor: .kilo,
        maxDuration: .seconds(5), maxIterations: 20)

    Benchmark("WebSocket echo round trip: RealtimeCore WebSocketTransport", configuration: roundTrip) { benchmarkRef in
        // The handler closure is @Sendable; the benchmark object is only used from this one task.
        nonisolated(unsafe) let benchmark = benchmarkRef
        let url = try await EchoServerHolder.shared.url()
        try await WebSocketTransport.connect(to: url, configuration: .init(autoPing: nil)) { connection in
            var iterator = connection.inbound.makeAsyncIterator()
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                try await connection.send(text: "ping")
                _ = try await iterator.next()
            }
            benchmark.stopMeasurement()
            try await connection.close()
        }
    }

    Benchmark("WebSocket echo round trip: swift-websocket WSClient direct", configuration: roundTrip) { benchmarkRef in
        nonisolated(unsafe) let benchmark = benchmarkRef
        let url = try await EchoServerHolder.shared.url()
        let logger = Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
        try await WebSocketClient.connect(url: url, configuration: .init(maxFrameSize: 1 << 21, validateUTF8: true), logger: logger) {
            inbound, outbound, _ in
            var iterator = inbound.messages(maxSize: 1 << 20).makeAsyncIterator()
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                try await outbound.write(.text("ping"))
                _ = try await iterator.next()
            }
            benchmark.stopMeasurement()
            try await outbound.close(.normalClosure, reason: nil)
        }
    }

    // MARK: SSE parsing of the 50 MiB corpus, 64 KiB chunks, against a memchr newline scan.

    let corpus = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal], warmupIterations: 1, maxDuration: .seconds(10), maxIterations: 20)

    for (name, bytes) in [("LF", { Corpus.lf }), ("CRLF", { Corpus.crlf })] {
        Benchmark("SSE parse 50 MiB corpus \(name): SSEParser", configuration: corpus) { benchmark in
            let input = bytes()
            benchmark.startMeasurement()
            var events = 0
            var parser = SSEParser()
            input.withUnsafeBytes { all in
                var offset = 0
                while offset < all.count {
                    let end = min(offset + Corpus.chunkSize, all.count)
                    try? parser.parse(bytes: UnsafeRawBufferPointer(rebasing: all[offset..<end])) { output in
                        if case .event = output { events += 1 }
                    }
                    offset = end
                }
            }
            benchmark.stopMeasurement()
            blackHole(events)
        }

        Benchmark("SSE parse 50 MiB corpus \(name): memchr newline scan (ceiling)", configuration: corpus) { benchmark in
            let input = bytes()
            benchmark.startMeasurement()
            var lines = 0
            input.withUnsafeBytes { all in
                var offset = 0
                while offset < all.count {
                    let end = min(offset + Corpus.chunkSize, all.count)
                    var position = offset
                    while position < end, let hit = memchr(all.baseAddress! + position, 0x0A, end - position) {
                        lines += 1
                        position = UnsafeRawPointer(hit) - all.baseAddress! + 1
                    }
                    offset = end
                }
            }
            benchmark.stopMeasurement()
            blackHole(lines)
        }
    }

    // MARK: EventSource end to end: the LF corpus served by a loopback HTTP server, parsed and delivered.

    Benchmark("EventSource end to end: 50 MiB LF corpus from a loopback server", configuration: corpus) { benchmark in
        let server = try await ScriptedHTTPServer.start()
        let body = ByteBuffer(bytes: Corpus.lf)
        server.route("/corpus") { _ in ScriptedResponse(headers: [("Content-Type", "text/event-stream")], body: .bytes(body)) }
        let expected = 246_631  // manifest.json expected_events for seed 20261121, 50 MiB
        for _ in benchmark.scaledIterations {
            let source = EventSource(
                url: URL(string: server.baseURL + "/corpus")!,
                configuration: EventSourceConfiguration(reachability: AlwaysReachable()))
            var events = 0
            for try await _ in source.events {
                events += 1
                if events == expected { break }
            }
            source.close()
            blackHole(events)
        }
        await server.stop()
    }
}
