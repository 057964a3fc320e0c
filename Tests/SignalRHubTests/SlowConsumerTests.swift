import Foundation
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// The memory promises of Sources/SignalRHub/SignalRHub.docc/SignalRGuide.md under a slow consumer: a stream's items and the handlers'
/// queue are bounded; when they are full the connection stops reading (a later call cannot
/// complete), and nothing is lost once the consumer catches up.
@Suite("Slow consumers: bounded buffers and backpressure", .serialized, .timeLimit(.minutes(3)))
struct SlowConsumerTests {
    @Test("A stream read slowly holds at most streamBufferSize items; reading stops, then everything arrives in order")
    func slowStreamConsumer() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        server.stream("many") { call in
            let count = call.arguments.first?.intValue ?? 0
            return AsyncThrowingStream { continuation in
                for value in 0..<count { continuation.yield(.number(Double(value))) }
                continuation.finish()
            }
        }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets)
            .withOptions { $0.streamBufferSize = 16 }.build()
        try await connection.start()
        let stream = try await connection.streamRaw(method: "many", arguments: [5_000])
        var iterator = stream.makeAsyncIterator()
        #expect(try await iterator.next() == 0)
        // The consumer pauses: once 16 items wait, the connection stops reading, so a call made
        // now cannot get its completion.
        let echo = Task { () -> String in try await connection.invoke(method: "echo", arguments: "late") }
        let finished = NIOLockedValueBox(false)
        let watcher = Task {
            _ = try? await echo.value
            finished.withLockedValue { $0 = true }
        }
        // "The call does not complete" is an absence: it is watched for a while, not awaited.
        try await Task.sleep(for: .milliseconds(800))
        #expect(!finished.withLockedValue { $0 }, "the read loop waits for the stream's consumer")
        var values = [0]
        while let value = try await iterator.next() { values.append(value.intValue ?? -1) }
        #expect(values == Array(0..<5_000))
        #expect(try await echo.value == "late")
        _ = await watcher.value
        await connection.stop()
    }

    @Test("Handlers that block hold at most handlerQueueSize invocations; reading stops, then every invocation runs in order")
    func slowHandlers() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let written = NIOLockedValueBox(0)
        server.method("burst", concurrent: true) { [weak server] call in
            for value in 0..<(call.arguments[0].intValue ?? 0) {
                try await server?.invokeClientSend(call.connectionId, "item", [.number(Double(value))])
                written.withLockedValue { $0 += 1 }
            }
            return nil
        }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets)
            .withOptions { $0.handlerQueueSize = 8 }.build()
        let gate = NIOLockedValueBox(false)
        let seen = Recorder<Int>()
        connection.on("item") { (value: Int) in
            // A handler that blocks until the test opens the gate (the behaviour under test).
            while !gate.withLockedValue({ $0 }) { try? await Task.sleep(for: .milliseconds(5)) }
            seen.append(value)
        }
        try await connection.start()
        try await connection.send(method: "burst", arguments: 500)
        // The call goes out once the server has written the whole burst: its completion is then
        // behind 500 invocations the client holds in the socket.
        try await waitUntil("the server wrote the burst", limit: .seconds(20)) { written.withLockedValue { $0 } == 500 }
        let echo = Task { () -> String in try await connection.invoke(method: "echo", arguments: "late") }
        // Wait until the call reached the server (a loaded machine can take seconds to write it).
        try await waitUntil("the call reached the server", limit: .seconds(20)) { server.receivedTargets.contains("echo") }
        #expect(seen.all.isEmpty)
        #expect(server.receivedTargets.contains("echo"), "the call went out")
        // Its completion is behind the queued invocations on the socket, which the client stopped reading.
        let finished = NIOLockedValueBox(false)
        let watcher = Task {
            _ = try? await echo.value
            finished.withLockedValue { $0 = true }
        }
        // "The call does not complete" is an absence: it is watched for a while, not awaited.
        try await Task.sleep(for: .milliseconds(300))
        #expect(!finished.withLockedValue { $0 }, "the read loop waits for the handlers")
        gate.withLockedValue { $0 = true }
        #expect(try await seen.wait(count: 500) == Array(0..<500))
        #expect(try await echo.value == "late")
        _ = await watcher.value
        await connection.stop()
    }
}
