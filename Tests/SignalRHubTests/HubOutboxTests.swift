import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
@_spi(RealtimeEngine) import RealtimeCore
import RealtimeTesting
@testable import SignalRHub
import Testing

/// The outbox of the HTTP transports (Server-Sent Events, Long Polling): one POST in flight,
/// everything queued meanwhile in the next one, and no send left waiting when a POST fails or the
/// connection ends.
@Suite("HubOutbox")
struct HubOutboxTests {
    @Test("POSTs go one at a time; sends that arrive meanwhile go together in the next, in order")
    func postsOneAtATimeAndBatchesTheRest() async throws {
        let server = try await LongPollServer.start()
        defer { Task { await server.stop() } }
        let outbox = HubOutbox(replay: nil)
        let inFlight = NIOLockedValueBox(0)
        let maxInFlight = NIOLockedValueBox(0)
        let post: @Sendable (ByteBuffer) async throws -> Void = { body in
            inFlight.withLockedValue { count in
                count += 1
                maxInFlight.withLockedValue { $0 = max($0, count) }
            }
            defer { inFlight.withLockedValue { $0 -= 1 } }
            let (head, _) = try await HTTPTransport.execute(HTTPRequestSpec(url: server.url, method: .POST, body: body))
            guard head.status == .ok else { throw RealtimeError.badStatus(head.status, url: server.url) }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await outbox.postLoop(post) }
            try await withThrowingTaskGroup(of: Void.self) { senders in
                for index in 0..<20 {
                    // Pacing, not a wait for a condition: sends keep arriving while a POST is in flight.
                    try await Task.sleep(for: .milliseconds(1))
                    senders.addTask { try await outbox.send(Array("m\(index),".utf8)) }
                }
                try await senders.waitForAll()
            }
            group.cancelAll()
        }
        let posts = server.received
        #expect(maxInFlight.withLockedValue { $0 } == 1)
        #expect(posts.count < 20, "sends that arrive during a POST are batched")
        let all = posts.flatMap { $0.split(separator: ",").map(String.init) }
        #expect(Set(all) == Set((0..<20).map { "m\($0)" }))
        #expect(all.count == 20)
    }

    /// A POST that fails without an answer may have reached the server: its sends fail with
    /// `connectionClosed` saying so. A status the server answered is its refusal, passed on as is.
    @Test("A failed POST fails every send it carried, saying whether it may have arrived; the next POST carries what comes after")
    func aFailedPostFailsItsSends() async throws {
        struct Reset: Error {}
        let outbox = HubOutbox(replay: nil)
        let posts = NIOLockedValueBox(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await outbox.postLoop { _ in
                    switch posts.withLockedValue({ $0 += 1; return $0 }) {
                    case 1: throw Reset()
                    case 2: throw RealtimeError.badStatus(.internalServerError, url: "http://127.0.0.1/hub")
                    default: return
                    }
                }
            }
            let reset = await #expect(throws: RealtimeError.self) { try await outbox.send([1]) }
            #expect(reset?.code == .connectionClosed)
            #expect(reset?.detail.contains("may have received it") == true)
            let refused = await #expect(throws: RealtimeError.self) { try await outbox.send([2]) }
            #expect(refused?.status == .internalServerError)
            try await outbox.send([3])
            group.cancelAll()
        }
        #expect(posts.withLockedValue { $0 } == 3)
    }

    @Test("When the connection ends, queued sends fail with its error and later sends fail at once")
    func closeFailsWaitingSends() async throws {
        let outbox = HubOutbox(replay: nil)
        // No writer: the send waits in the queue until the close.
        let waiting = Task { try await outbox.send([1]) }
        try await waitUntil("the send is queued") { outbox.queue.queuedCount == 1 }
        outbox.close(RealtimeError(.connectionClosed, "gone"))
        let error = await #expect(throws: RealtimeError.self) { try await waiting.value }
        #expect(error?.detail == "gone")
        await #expect(throws: RealtimeError.self) { try await outbox.send([2]) }
        #expect(outbox.post([3]) == false)
    }
}
