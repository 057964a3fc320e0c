import NIOConcurrencyHelpers
@_spi(RealtimeEngine) import RealtimeCore
import Testing

/// The one outbox: order, the limit, the writer's batches, pausing, the resend window's memory bound
/// and its confirmation rule, without sockets.
@Suite(.timeLimit(.minutes(1))) struct OutboxTests {
    struct Message: OutboxMessage, Equatable {
        var id: Int
        var ack: Int? = nil
        var bytes = 10
        var control = false
        var outboxSize: Int { bytes }
        var outboxParts: Int { 1 }
        var isApplicationData: Bool { !control }
    }

    @Test func theWindowKeepsAtMostItsMessagesAndBytes() {
        let byCount = Outbox<Message>(window: ResendWindow(frames: 100, bytes: 1 << 20))
        byCount.wroteUnconfirmed((0..<1_000).map { Message(id: $0) })
        #expect(byCount.takeUnsent().written.map(\.id) == Array(900..<1_000), "the newest stay: the oldest most likely arrived")

        let byBytes = Outbox<Message>(window: ResendWindow(frames: 10_000, bytes: 10_000))
        byBytes.wroteUnconfirmed((0..<1_000).map { Message(id: $0, bytes: 101) })
        let kept = byBytes.takeUnsent().written
        #expect(kept.reduce(0) { $0 + $1.outboxSize } <= 10_000)
        #expect(kept.count == 10_000 / 101)
    }

    @Test func aConfirmationConfirmsItsMessageAndEveryOneBefore() {
        let outbox = Outbox<Message>(window: .standard)
        outbox.wroteUnconfirmed([Message(id: 0), Message(id: 1, ack: 7), Message(id: 2), Message(id: 3, ack: 8)])
        outbox.confirm { $0.ack == 7 }
        outbox.confirm { $0.ack == 99 }  // nothing matches: nothing is confirmed
        #expect(outbox.takeUnsent().written.map(\.id) == [2, 3])
    }

    /// What leaves the window unconfirmed is counted by key (what the protocol would have re-sent,
    /// which it can no longer name), until a confirmation of a message still held clears it.
    @Test func messagesLeavingTheWindowUnconfirmedAreCountedUntilAConfirmation() {
        struct Keyed: OutboxMessage {
            var id: Int
            var key: String?
            var outboxSize: Int { 10 }
            var outboxParts: Int { 1 }
            var isApplicationData: Bool { true }
            var evictionKey: String? { key }
        }
        let outbox = Outbox<Keyed>(window: ResendWindow(frames: 3, bytes: 1 << 20))
        outbox.wroteUnconfirmed((0..<5).map { Keyed(id: $0, key: $0 == 1 ? nil : ($0.isMultiple(of: 2) ? "/a" : "/b")) })
        #expect(outbox.evictedUnconfirmed == ["/a": 1], "0 and 1 left; 1 has no key")
        outbox.wroteUnconfirmed([Keyed(id: 5, key: "/b"), Keyed(id: 6, key: "/a")])
        #expect(outbox.evictedUnconfirmed == ["/a": 2, "/b": 1], "2 and 3 left too")
        outbox.confirm { $0.id == 99 }
        #expect(outbox.evictedUnconfirmed == ["/a": 2, "/b": 1], "a confirmation that matches nothing held clears nothing")
        outbox.confirm { $0.id == 5 }
        #expect(outbox.evictedUnconfirmed.isEmpty, "5 arrived, so did everything written before it")
        outbox.wroteUnconfirmed((7..<10).map { Keyed(id: $0, key: "/a") })
        #expect(outbox.evictedUnconfirmed == ["/a": 1], "6 left after the confirmation")

        // The messages a default conformance leaves the window with are not counted.
        let plain = Outbox<Message>(window: ResendWindow(frames: 1, bytes: 1 << 20))
        plain.wroteUnconfirmed((0..<10).map { Message(id: $0) })
        #expect(plain.evictedUnconfirmed.isEmpty)
        #expect(plain.takeUnsent().written.map(\.id) == [9])
    }

    @Test func controlMessagesAreNeverKeptOrCounted() {
        let outbox = Outbox<Message>(window: .standard, limit: 20)
        outbox.wroteUnconfirmed([Message(id: 0, control: true), Message(id: 1)])
        #expect(outbox.push(Message(id: 2, bytes: 1_000, control: true)))
        #expect(outbox.pushBounded(Message(id: 3, bytes: 15)) == .queued, "the control message does not count")
        #expect(outbox.pushBounded(Message(id: 4, bytes: 15)) == .full)
        let (written, unwritten) = outbox.takeUnsent()
        #expect(written.map(\.id) == [1])
        #expect(unwritten.map(\.id) == [2, 3])
    }

    /// One take hands the writer everything queued (up to its limits), in order; the writer waits
    /// while nothing is queued or the outbox is paused, and a retired generation stops it.
    @Test func theWriterTakesBatchesInOrder() async throws {
        let outbox = Outbox<Message>()
        for id in 0..<5 { outbox.push(Message(id: id)) }
        #expect(await outbox.take(maxBytes: .max, generation: 0)?.map(\.id) == [0, 1, 2, 3, 4])
        outbox.finishedWrite()
        for id in 5..<10 { outbox.push(Message(id: id)) }
        #expect(await outbox.take(maxBytes: 30, generation: 0)?.map(\.id) == [5, 6, 7], "30 bytes: three messages")
        outbox.requeueFront([Message(id: 5), Message(id: 6), Message(id: 7)])
        outbox.finishedWrite()
        #expect(await outbox.take(maxBytes: .max, maxParts: 2, generation: 0)?.map(\.id) == [5, 6])
        outbox.finishedWrite()
        let waiting = Task { await outbox.take(maxBytes: .max, generation: 1) }
        let next = outbox.resume(retireWriter: true)
        #expect(next == 1)
        #expect(await waiting.value?.map(\.id) == [7, 8, 9], "the new writer's generation")
        outbox.close()
        #expect(await outbox.take(maxBytes: .max, generation: 1) == nil)
        #expect(!outbox.push(Message(id: 10)), "closed: the caller keeps the message")
    }
}
