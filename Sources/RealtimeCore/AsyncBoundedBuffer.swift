import DequeModule
import NIOConcurrencyHelpers

/// A buffer between one producer and one consumer that holds at most `capacity` elements: ``send(_:)``
/// waits while it is full, so a producer that reads a socket stops reading when the consumer is
/// behind (real backpressure instead of a growing buffer).
package final class AsyncBoundedBuffer<Element: Sendable>: Sendable {
    private struct State {
        var items: Deque<Element> = []
        var consumer: CheckedContinuation<Element?, any Error>?
        var producer: CheckedContinuation<Void, Never>?
        var finished = false
        var failure: (any Error)?
    }

    private enum SendStep { case done, wait }
    private enum Take { case element(Element), end, failure(any Error), wait }

    package let capacity: Int
    private let state = NIOLockedValueBox(State())

    package init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// Adds `element`, waiting while the buffer is full. Returns at once (dropping nothing that
    /// anybody will read) once the buffer is finished, or when the calling task is cancelled.
    package func send(_ element: Element) async {
        while true {
            let (step, consumer) = state.withLockedValue { state -> (SendStep, CheckedContinuation<Element?, any Error>?) in
                if state.finished { return (.done, nil) }
                if let consumer = state.consumer {
                    state.consumer = nil
                    return (.done, consumer)
                }
                if state.items.count < capacity {
                    state.items.append(element)
                    return (.done, nil)
                }
                return (.wait, nil)
            }
            if let consumer {
                consumer.resume(returning: element)
                return
            }
            if case .done = step { return }
            if Task.isCancelled { return }
            await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    let resumeNow = state.withLockedValue { state -> Bool in
                        if state.finished || state.items.count < capacity { return true }
                        state.producer = continuation
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            } onCancel: {
                self.wakeProducer()
            }
            if Task.isCancelled { return }
        }
    }

    /// Whether ``send(_:)`` would wait now.
    package var isFull: Bool { state.withLockedValue { $0.items.count >= capacity && $0.consumer == nil } }

    private func wakeProducer() {
        state.withLockedValue { state in
            defer { state.producer = nil }
            return state.producer
        }?.resume()
    }

    /// The next element; nil once finished and drained; throws the finishing error after the
    /// elements sent before it, or `CancellationError` when the consumer's task is cancelled.
    package func next() async throws -> Element? {
        let step = state.withLockedValue { Self.take(from: &$0) }
        switch step {
        case .element(let element):
            wakeProducer()
            return element
        case .end: return nil
        case .failure(let error): throw error
        case .wait: break
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let now = state.withLockedValue { state -> Take in
                    let step = Self.take(from: &state)
                    guard case .wait = step else { return step }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.consumer = continuation
                    return .wait
                }
                switch now {
                case .element(let element): continuation.resume(returning: element)
                case .end: continuation.resume(returning: nil)
                case .failure(let error): continuation.resume(throwing: error)
                case .wait: wakeProducer()
                }
            }
        } onCancel: {
            self.state.withLockedValue { state in
                defer { state.consumer = nil }
                return state.consumer
            }?.resume(throwing: CancellationError())
        }
    }

    /// What the consumer gets now: the oldest element, the end, the finishing error, or nothing yet.
    private static func take(from state: inout State) -> Take {
        if let first = state.items.popFirst() { return .element(first) }
        guard state.finished else { return .wait }
        if let failure = state.failure {
            state.failure = nil
            return .failure(failure)
        }
        return .end
    }

    /// Ends the buffer: the consumer reads what is buffered, then nil (or `error`). A waiting
    /// producer returns.
    package func finish(throwing error: (any Error)? = nil) {
        let (consumer, producer, failure) = state.withLockedValue { state -> (CheckedContinuation<Element?, any Error>?, CheckedContinuation<Void, Never>?, (any Error)?) in
            if state.finished { return (nil, nil, nil) }
            state.finished = true
            state.failure = error
            defer {
                state.consumer = nil
                state.producer = nil
            }
            // A parked consumer means the buffer is empty: it gets the end now.
            if state.consumer != nil { state.failure = nil }
            return (state.consumer, state.producer, error)
        }
        if let consumer {
            if let failure { consumer.resume(throwing: failure) } else { consumer.resume(returning: nil) }
        }
        producer?.resume()
    }
}
