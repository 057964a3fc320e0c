@testable import SocketIOEngine
import Testing

/// The resend window's memory bound and its confirmation rule, without sockets.
@Suite struct EngineIOOutboxTests {
    func frame(_ index: Int, ackID: Int? = nil, bytes: Int = 10) -> EngineIOFrame {
        EngineIOFrame(
            packets: [EngineIOPacket(.message, .text(String(repeating: "x", count: bytes)))], requeueNamespace: "/", ackID: ackID)
    }

    @Test func theWindowKeepsAtMostItsFramesAndBytes() {
        let byFrames = EngineIOOutbox(window: ResendWindow(frames: 100, bytes: 1 << 20))
        byFrames.wroteUnconfirmed((0..<1_000).map { frame($0) })
        #expect(byFrames.takeUnsent().written.count == 100)
        #expect(byFrames.presumedDelivered == 900)

        let byBytes = EngineIOOutbox(window: ResendWindow(frames: 10_000, bytes: 10_000))
        byBytes.wroteUnconfirmed((0..<1_000).map { frame($0, bytes: 99) })  // 101 bytes each as polling size + 1
        let kept = byBytes.takeUnsent().written
        #expect(kept.reduce(0) { $0 + $1.pollingSize } <= 10_000)
        #expect(kept.count == 10_000 / 101)
    }

    @Test func anAckConfirmsItsFrameAndEveryFrameBefore() {
        let outbox = EngineIOOutbox()
        outbox.wroteUnconfirmed([frame(0), frame(1, ackID: 7), frame(2), frame(3, ackID: 8)])
        outbox.confirm(namespace: "/", ackID: 7)
        outbox.confirm(namespace: "/other", ackID: 8)  // another namespace's ack id confirms nothing here
        let left = outbox.takeUnsent().written
        #expect(left.map(\.ackID) == [nil, 8])
    }

    @Test func controlFramesAreNeverKept() {
        let outbox = EngineIOOutbox()
        outbox.wroteUnconfirmed([EngineIOFrame(packets: [EngineIOPacket(.pong)], requeueNamespace: nil), frame(1)])
        #expect(outbox.takeUnsent().written.count == 1)
    }
}
