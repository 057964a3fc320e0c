// A shared manager that keeps one source for the whole app, as apps written for IKEventSource do:
// it keeps the last event ID itself (IKEventSource 3 does not), reconnects from onComplete after a
// back-off, and hands events to the rest of the app with NotificationCenter on the main queue.
// On the main actor, as a Swift 6 app keeps such a singleton (the callbacks come on the main queue).
import Foundation
import IKEventSource

extension Notification.Name {
    static let streamEvent = Notification.Name("StreamManager.event")
    static let streamState = Notification.Name("StreamManager.state")
}

@MainActor final class StreamManager {
    static let shared = StreamManager()

    private var eventSource: EventSource?
    private var savedEventId: String? {
        get { UserDefaults.standard.string(forKey: "StreamManager.lastEventId") }
        set { UserDefaults.standard.set(newValue, forKey: "StreamManager.lastEventId") }
    }
    private var attempts = 0
    private(set) var isConnected = false
    var token = ""

    func start(url: URL) {
        guard eventSource == nil else { return }
        let source = EventSource(url: url, headers: ["Authorization": "Bearer \(token)", "X-Client": "ios"])
        eventSource = source

        source.onOpen { [weak self] in
            self?.attempts = 0
            self?.isConnected = true
            NotificationCenter.default.post(name: .streamState, object: nil, userInfo: ["connected": true])
        }
        source.onMessage { [weak self] id, _, data in
            self?.handle(id: id, name: "message", data: data)
        }
        for name in ["order-created", "order-updated", "order-deleted"] {
            source.addEventListener(name) { [weak self] id, event, data in
                self?.handle(id: id, name: event ?? name, data: data)
            }
        }
        source.onComplete { [weak self] statusCode, reconnect, error in
            guard let self = self else { return }
            self.isConnected = false
            NotificationCenter.default.post(name: .streamState, object: nil, userInfo: ["connected": false])
            if let statusCode = statusCode, statusCode == 401 || statusCode == 403 { return }
            if let error = error, error.code == NSURLErrorCancelled { return }
            self.scheduleReconnect(after: self.eventSource?.retryTime ?? 3000)
        }
        if source.readyState == .closed {
            source.connect(lastEventId: savedEventId)
        }
    }

    private func handle(id: String?, name: String, data: String?) {
        if let id = id { savedEventId = id }
        guard let data = data else { return }
        DispatchQueue.main.async {
            NotificationCenter.default.post(name: .streamEvent, object: nil, userInfo: ["name": name, "data": data])
        }
    }

    private func scheduleReconnect(after milliseconds: Int) {
        attempts += 1
        let delay = min(milliseconds * attempts, 30_000)
        DispatchQueue.main.asyncAfter(deadline: .now() + .milliseconds(delay)) { [weak self] in
            guard let self = self, let source = self.eventSource else { return }
            source.connect(lastEventId: self.savedEventId ?? source.lastEventId)
        }
    }

    func stop() {
        eventSource?.removeEventListener("order-created")
        eventSource?.disconnect()
        eventSource = nil
    }

    var listenedEvents: [String] { eventSource?.events() ?? [] }
}
